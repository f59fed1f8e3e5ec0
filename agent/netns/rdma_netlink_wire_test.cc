#include "agent/netns/rdma_netlink_wire.h"

#include <gtest/gtest.h>
#include <libmnl/libmnl.h>

#include <cstring>
#include <vector>

namespace fabric::netns::wire {
namespace {

// Literal wire values (Linux UAPI rdma_netlink.h), independent of the code.
constexpr uint16_t kType = (5 << 10);  // RDMA_NL_NLDEV << 10

struct Attr {
  uint16_t type;
  std::vector<uint8_t> payload;
};

std::vector<Attr> Attrs(const nlmsghdr* nlh) {
  std::vector<Attr> out;
  mnl_attr_parse(
      nlh, 0,
      [](const nlattr* attr, void* data) {
        const auto* p = static_cast<const uint8_t*>(mnl_attr_get_payload(attr));
        static_cast<std::vector<Attr>*>(data)->push_back(
            {mnl_attr_get_type(attr), std::vector<uint8_t>(p, p + mnl_attr_get_payload_len(attr))});
        return MNL_CB_OK;
      },
      &out);
  return out;
}

uint32_t U32(const std::vector<uint8_t>& b) {
  uint32_t v;
  std::memcpy(&v, b.data(), 4);
  return v;
}

TEST(RdmaNetlinkWireTest, MoveRequestMatchesRdmaDevSetNetns) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* nlh = PutDevSetNetns(buf.data(), 7, 42);
  EXPECT_EQ(nlh->nlmsg_type, kType + 2);  // RDMA_NLDEV_CMD_SET
  EXPECT_EQ(nlh->nlmsg_flags, NLM_F_REQUEST | NLM_F_ACK);
  EXPECT_EQ(nlh->nlmsg_len, 16u + 8u + 8u);  // header + two u32 attributes
  auto attrs = Attrs(nlh);
  ASSERT_EQ(attrs.size(), 2u);
  EXPECT_EQ(attrs[0].type, 1);  // RDMA_NLDEV_ATTR_DEV_INDEX
  EXPECT_EQ(U32(attrs[0].payload), 7u);
  EXPECT_EQ(attrs[1].type, 68);  // RDMA_NLDEV_NET_NS_FD
  EXPECT_EQ(U32(attrs[1].payload), 42u);
}

TEST(RdmaNetlinkWireTest, DumpAndSysGetRequests) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* dump = PutDevDump(buf.data());
  EXPECT_EQ(dump->nlmsg_type, kType + 1);  // RDMA_NLDEV_CMD_GET
  EXPECT_EQ(dump->nlmsg_flags, NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP);
  EXPECT_EQ(dump->nlmsg_len, 16u);
  nlmsghdr* sys = PutSysGet(buf.data());
  EXPECT_EQ(sys->nlmsg_type, kType + 6);  // RDMA_NLDEV_CMD_SYS_GET
  EXPECT_EQ(sys->nlmsg_flags, NLM_F_REQUEST | NLM_F_ACK);
}

TEST(RdmaNetlinkWireTest, ParsesKernelDeviceAndModeReplies) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* dev = mnl_nlmsg_put_header(buf.data());
  dev->nlmsg_type = kType + 1;
  mnl_attr_put_u32(dev, 1, 3);
  mnl_attr_put_strz(dev, 2, "mlx5_1");
  mnl_attr_put_u64(dev, 5, 0x1122);  // node GUID etc.: ignored
  mnl_attr_put_u32(dev, 500, 1);     // unknown future attribute: ignored
  RdmaLink link;
  ASSERT_EQ(ParseDevice(dev, &link), ParseResult::kOk);
  EXPECT_EQ(link, (RdmaLink{3, "mlx5_1"}));

  nlmsghdr* sys = mnl_nlmsg_put_header(buf.data());
  sys->nlmsg_type = kType + 6;
  mnl_attr_put_u8(sys, 66, 0);  // RDMA_NLDEV_SYS_ATTR_NETNS_MODE = exclusive
  NetnsMode mode = NetnsMode::kShared;
  ASSERT_EQ(ParseNetnsMode(sys, &mode), ParseResult::kOk);
  EXPECT_EQ(mode, NetnsMode::kExclusive);

  nlmsghdr* old_kernel = mnl_nlmsg_put_header(buf.data());
  old_kernel->nlmsg_type = kType + 6;
  EXPECT_EQ(ParseNetnsMode(old_kernel, &mode), ParseResult::kAbsent);
}

TEST(RdmaNetlinkWireTest, RejectsMalformedAttributes) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  nlmsghdr* dev = mnl_nlmsg_put_header(buf.data());
  mnl_attr_put_u8(dev, 1, 3);  // index must be u32
  mnl_attr_put_strz(dev, 2, "x");
  RdmaLink link;
  EXPECT_EQ(ParseDevice(dev, &link), ParseResult::kMalformed);
}

}  // namespace
}  // namespace fabric::netns::wire
