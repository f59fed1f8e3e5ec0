#include "agent/netns/rdma_netlink_wire.h"

#include <libmnl/libmnl.h>

#if __has_include(<rdma/rdma_netlink.h>)
#include <rdma/rdma_netlink.h>
#define FABRIC_HAVE_RDMA_NETLINK_H 1
#endif

namespace fabric::netns::wire {
namespace {

#ifdef FABRIC_HAVE_RDMA_NETLINK_H
constexpr int kNlNldev = RDMA_NL_NLDEV;
constexpr int kCmdGet = RDMA_NLDEV_CMD_GET;
constexpr int kCmdSet = RDMA_NLDEV_CMD_SET;
constexpr int kCmdSysGet = RDMA_NLDEV_CMD_SYS_GET;
constexpr int kAttrDevIndex = RDMA_NLDEV_ATTR_DEV_INDEX;
constexpr int kAttrDevName = RDMA_NLDEV_ATTR_DEV_NAME;
constexpr int kAttrNetNsFd = RDMA_NLDEV_NET_NS_FD;
constexpr int kAttrSysNetnsMode = RDMA_NLDEV_SYS_ATTR_NETNS_MODE;
constexpr int kAttrMax = RDMA_NLDEV_ATTR_MAX;
#else
// Linux UAPI include/uapi/rdma/rdma_netlink.h (stable ABI); the header is not
// installed here (linux-libc-dev provides it), so the values are spelled out.
constexpr int kNlNldev = 5;
constexpr int kCmdGet = 1;
constexpr int kCmdSet = 2;
constexpr int kCmdSysGet = 6;
constexpr int kAttrDevIndex = 1;
constexpr int kAttrDevName = 2;
constexpr int kAttrNetNsFd = 68;
constexpr int kAttrSysNetnsMode = 66;
constexpr int kAttrMax = 128;
#endif
static_assert(kNlNldev == 5 && kCmdGet == 1 && kCmdSet == 2 && kCmdSysGet == 6);
static_assert(kAttrDevIndex == 1 && kAttrDevName == 2 && kAttrNetNsFd == 68 &&
              kAttrSysNetnsMode == 66);

// RDMA_NL_GET_TYPE(client, op)
constexpr uint16_t NlType(int op) { return static_cast<uint16_t>((kNlNldev << 10) + op); }

nlmsghdr* Put(char* buf, int op, uint16_t flags) {
  nlmsghdr* nlh = mnl_nlmsg_put_header(buf);
  nlh->nlmsg_type = NlType(op);
  nlh->nlmsg_flags = flags;
  return nlh;
}

struct Attrs {
  const nlattr* tb[kAttrMax + 1] = {};
  bool malformed = false;
};

int CollectAttr(const nlattr* attr, void* data) {
  auto* attrs = static_cast<Attrs*>(data);
  int type = mnl_attr_get_type(attr);
  if (type < 0 || type > kAttrMax) return MNL_CB_OK;  // newer kernel attribute
  bool bad = (type == kAttrDevIndex && mnl_attr_validate(attr, MNL_TYPE_U32) < 0) ||
             (type == kAttrDevName && mnl_attr_validate(attr, MNL_TYPE_NUL_STRING) < 0) ||
             (type == kAttrSysNetnsMode && mnl_attr_validate(attr, MNL_TYPE_U8) < 0);
  if (bad) {
    attrs->malformed = true;
    return MNL_CB_ERROR;
  }
  attrs->tb[type] = attr;
  return MNL_CB_OK;
}

bool Parse(const nlmsghdr* nlh, Attrs* a) {
  return mnl_attr_parse(nlh, 0, CollectAttr, a) == MNL_CB_OK && !a->malformed;
}

}  // namespace

nlmsghdr* PutSysGet(char* buf) { return Put(buf, kCmdSysGet, NLM_F_REQUEST | NLM_F_ACK); }

nlmsghdr* PutDevDump(char* buf) {
  return Put(buf, kCmdGet, NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP);
}

nlmsghdr* PutDevSetNetns(char* buf, uint32_t dev_index, uint32_t netns_fd) {
  nlmsghdr* nlh = Put(buf, kCmdSet, NLM_F_REQUEST | NLM_F_ACK);
  mnl_attr_put_u32(nlh, kAttrDevIndex, dev_index);
  mnl_attr_put_u32(nlh, kAttrNetNsFd, netns_fd);
  return nlh;
}

ParseResult ParseDevice(const nlmsghdr* nlh, RdmaLink* out) {
  Attrs a;
  if (!Parse(nlh, &a)) return ParseResult::kMalformed;
  if (!a.tb[kAttrDevIndex] || !a.tb[kAttrDevName]) return ParseResult::kAbsent;
  out->index = mnl_attr_get_u32(a.tb[kAttrDevIndex]);
  out->name = mnl_attr_get_str(a.tb[kAttrDevName]);
  return ParseResult::kOk;
}

ParseResult ParseNetnsMode(const nlmsghdr* nlh, NetnsMode* out) {
  Attrs a;
  if (!Parse(nlh, &a)) return ParseResult::kMalformed;
  if (!a.tb[kAttrSysNetnsMode]) return ParseResult::kAbsent;
  *out = mnl_attr_get_u8(a.tb[kAttrSysNetnsMode]) == 0 ? NetnsMode::kExclusive : NetnsMode::kShared;
  return ParseResult::kOk;
}

}  // namespace fabric::netns::wire
