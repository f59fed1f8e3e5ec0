#include "agent/restrack/restrack_wire.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libmnl/libmnl.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "test/fakes/restrack_test_util.h"

namespace fabric::restrack::wire {
namespace {

using ::testing::ElementsAre;
using testing::GsiEntry;
using ::testing::HasSubstr;
using testing::KernelEntry;
using testing::KernelEntryOf;
using testing::MessageBuilder;
using testing::Res;
using testing::ResourceMessage;
using testing::UserEntry;

// Literal wire values (Linux UAPI rdma_netlink.h), independent of the code.
constexpr uint16_t kNldev = 5 << 10;  // RDMA_NL_NLDEV << 10
constexpr uint16_t kDevIndex = 1, kDevName = 2, kPortIndex = 3;
constexpr uint16_t kResQp = 19, kResQpEntry = 20, kLqpn = 21, kPid = 28, kKernName = 29;
constexpr uint16_t kResMr = 40, kResMrEntry = 41, kMrlen = 45;

std::vector<RdmaResource> ParseOk(ResourceKind kind, const std::vector<std::string>& messages,
                                  std::optional<uint32_t> dev = std::nullopt) {
  ResourceDumpParser p(kind, dev);
  for (const std::string& m : messages) {
    absl::Status st = p.OnMessage(m);
    EXPECT_TRUE(st.ok()) << st;
  }
  EXPECT_EQ(p.rejected(), 0u);
  return p.resources();
}

absl::Status ParseOne(ResourceKind kind, const std::string& message) {
  ResourceDumpParser p(kind, std::nullopt);
  return p.OnMessage(message);
}

TEST(RestrackWireTest, ResourceDumpRequestsNameTheDevice) {
  std::vector<char> buf(MNL_SOCKET_BUFFER_SIZE);
  const std::pair<ResourceKind, uint16_t> kinds[] = {{ResourceKind::kQp, 10},
                                                     {ResourceKind::kCq, 12},
                                                     {ResourceKind::kMr, 13},
                                                     {ResourceKind::kPd, 14}};
  for (auto [kind, cmd] : kinds) {
    nlmsghdr* nlh = PutResourceDump(buf.data(), kind, 7);
    EXPECT_EQ(nlh->nlmsg_type, kNldev + cmd);
    EXPECT_EQ(nlh->nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
    EXPECT_EQ(nlh->nlmsg_flags, 0x301);
    ASSERT_EQ(nlh->nlmsg_len, 16u + 8u);  // header + one u32 attribute, no family header
    const auto* attr = reinterpret_cast<const nlattr*>(buf.data() + 16);
    EXPECT_EQ(attr->nla_type, kDevIndex);
    EXPECT_EQ(attr->nla_len, 8);
    uint32_t index;
    std::memcpy(&index, buf.data() + 20, 4);
    EXPECT_EQ(index, 7u);
  }
  nlmsghdr* list = PutDeviceListDump(buf.data());
  EXPECT_EQ(list->nlmsg_type, kNldev + 1);  // RDMA_NLDEV_CMD_GET
  EXPECT_EQ(list->nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
  EXPECT_EQ(list->nlmsg_len, 16u);
  EXPECT_STREQ(CommandName(ResourceKind::kMr), "RDMA_NLDEV_CMD_RES_MR_GET");
}

TEST(RestrackWireTest, QpsWithPidsAndTheKernelsOwn) {
  const std::string m = ResourceMessage(
      ResourceKind::kQp, 1, "rxe0",
      {GsiEntry(1), UserEntry(17, 164, 1), UserEntry(18, 166, 1), UserEntry(19, 170)});
  EXPECT_THAT(ParseOk(ResourceKind::kQp, {m}, 1u),
              ElementsAre(Res(ResourceKind::kQp, "rxe0", 1, 1, 0, "ib_core"),
                          Res(ResourceKind::kQp, "rxe0", 1, 17, 164),
                          Res(ResourceKind::kQp, "rxe0", 1, 18, 166),
                          Res(ResourceKind::kQp, "rxe0", 0, 19, 170)));
}

// libfabric 1.17's verbs provider creates a QP per device in fi_getinfo to
// learn its limits and destroys it at once, never connected: the dump says
// RESET. Only QPs past INIT, and not the stack's own, can move bytes.
TEST(RestrackWireTest, QpStatesAndTypesSayWhichQpsCanMoveBytes) {
  KernelEntry probe = UserEntry(30, 500, 0);
  probe.qp_state = kQpStateReset;
  KernelEntry init = UserEntry(31, 500, 1);
  init.qp_state = kQpStateInit;
  KernelEntry rtr = UserEntry(32, 500, 1);
  rtr.qp_state = kQpStateRtr;
  KernelEntry dead = UserEntry(33, 500, 1);
  dead.qp_state = kQpStateErr;
  KernelEntry ud = UserEntry(34, 500, 1);
  ud.qp_type = 4;  // UD: no RQPN, RQ_PSN or PATH_MIG_STATE in the entry
  KernelEntry ipoib = KernelEntryOf(35, "ib_ipoib", 1);
  ipoib.qp_type = 4;
  KernelEntry umr = KernelEntryOf(36, "mlx5_ib", 0);
  umr.qp_type = 0;  // MLX5_IB_QPT_REG_UMR truncated to the reply's u8
  std::vector<RdmaResource> got = ParseOk(
      ResourceKind::kQp, {ResourceMessage(ResourceKind::kQp, 1, "mlx5_0",
                                          {GsiEntry(1), probe, init, rtr, dead, ud, ipoib, umr})});
  ASSERT_EQ(got.size(), 8u);
  std::vector<std::string> states;
  std::vector<bool> moves, internal;
  for (const RdmaResource& r : got) {
    ASSERT_TRUE(r.qp_state.has_value() && r.qp_type.has_value());
    states.push_back(QpStateName(*r.qp_state));
    moves.push_back(QpCanMoveBytes(r));
    internal.push_back(IsStackInternalQp(r));
  }
  EXPECT_THAT(states, ElementsAre("RTS", "RESET", "INIT", "RTR", "ERR", "RTS", "RTS", "RTS"));
  EXPECT_THAT(moves, ElementsAre(true, false, false, true, false, true, true, true));
  EXPECT_THAT(internal, ElementsAre(true, false, false, false, false, false, false, true));
  EXPECT_EQ(*got[0].qp_type, kQpTypeGsi);
  EXPECT_EQ(*got[5].qp_type, 4);
  EXPECT_EQ(QpStateName(9), "state 9");
  // A reply without a state (none is known to omit it) counts as able to move.
  RdmaResource bare = Res(ResourceKind::kQp, "rxe0", 1, 7, 9);
  bare.qp_state.reset();
  EXPECT_TRUE(QpCanMoveBytes(bare));
}

TEST(RestrackWireTest, CqsMrsAndPds) {
  EXPECT_THAT(ParseOk(ResourceKind::kCq,
                      {ResourceMessage(ResourceKind::kCq, 2, "mlx5_0",
                                       {KernelEntryOf(0, "ib_core"), UserEntry(5, 4242)})}),
              ElementsAre(Res(ResourceKind::kCq, "mlx5_0", 0, 0, 0, "ib_core"),
                          Res(ResourceKind::kCq, "mlx5_0", 0, 5, 4242)));
  EXPECT_THAT(
      ParseOk(ResourceKind::kMr,
              {ResourceMessage(ResourceKind::kMr, 2, "mlx5_0",
                               {UserEntry(3, 4242, 0, 1ULL << 33), UserEntry(4, 4242, 0, 4096)})}),
      ElementsAre(Res(ResourceKind::kMr, "mlx5_0", 0, 3, 4242, "", 1ULL << 33),
                  Res(ResourceKind::kMr, "mlx5_0", 0, 4, 4242, "", 4096)));
  EXPECT_THAT(ParseOk(ResourceKind::kPd,
                      {ResourceMessage(ResourceKind::kPd, 2, "mlx5_0",
                                       {KernelEntryOf(0, "rdma_cm"), UserEntry(1, 4242)})}),
              ElementsAre(Res(ResourceKind::kPd, "mlx5_0", 0, 0, 0, "rdma_cm"),
                          Res(ResourceKind::kPd, "mlx5_0", 0, 1, 4242)));
}

TEST(RestrackWireTest, OlderKernelsSendNoIdsAndOwnersNotVisibleHaveNoPid) {
  KernelEntry old_cq = UserEntry(99, 77);
  old_cq.old_layout = true;  // Linux 4.18-5.0: no RES_CQN
  KernelEntry old_mr = UserEntry(99, 77, 0, 65536);
  old_mr.old_layout = true;
  RdmaResource want_cq = Res(ResourceKind::kCq, "rxe0", 0, 0, 77);
  want_cq.ctxn.reset();  // nor the links to a context or a PD
  RdmaResource want_mr = Res(ResourceKind::kMr, "rxe0", 0, 0, 77, "", 65536);
  want_mr.pdn.reset();
  EXPECT_THAT(ParseOk(ResourceKind::kCq, {ResourceMessage(ResourceKind::kCq, 1, "rxe0", {old_cq})}),
              ElementsAre(want_cq));
  EXPECT_THAT(ParseOk(ResourceKind::kMr, {ResourceMessage(ResourceKind::kMr, 1, "rxe0", {old_mr})}),
              ElementsAre(want_mr));
  // Linux 5.5+: an owner outside the reader's PID namespace, or exited, has
  // neither RES_PID nor RES_KERN_NAME.
  EXPECT_THAT(ParseOk(ResourceKind::kQp,
                      {ResourceMessage(ResourceKind::kQp, 1, "rxe0", {UserEntry(20, 0, 1)})}),
              ElementsAre(Res(ResourceKind::kQp, "rxe0", 1, 20, 0)));
}

TEST(RestrackWireTest, DumpOverSeveralMessagesAndAnEmptyTable) {
  std::vector<KernelEntry> first, second;
  for (uint32_t i = 0; i < 50; ++i) first.push_back(UserEntry(100 + i, 1000 + i, 1));
  for (uint32_t i = 0; i < 7; ++i) second.push_back(UserEntry(200 + i, 2000 + i, 1));
  ResourceDumpParser p(ResourceKind::kQp, 3);
  ASSERT_TRUE(p.OnMessage(ResourceMessage(ResourceKind::kQp, 3, "efa_0", first)).ok());
  ASSERT_TRUE(p.OnMessage(ResourceMessage(ResourceKind::kQp, 3, "efa_0", second)).ok());
  MessageBuilder empty(MessageType(ResourceKind::kQp), 0, 0);
  empty.Handle(3, "efa_0");
  ASSERT_TRUE(p.OnMessage(empty.Bytes()).ok());  // handle, no table: nothing
  ASSERT_EQ(p.resources().size(), 57u);
  EXPECT_EQ(p.entries_seen(), 57u);
  EXPECT_EQ(p.resources()[49], Res(ResourceKind::kQp, "efa_0", 1, 149, 1049));
  EXPECT_EQ(p.resources()[56], Res(ResourceKind::kQp, "efa_0", 1, 206, 2006));
}

TEST(RestrackWireTest, AReplyAboutAnotherDeviceOrKindIsMalformed) {
  absl::Status st = [] {
    ResourceDumpParser p(ResourceKind::kQp, 1);
    return p.OnMessage(ResourceMessage(ResourceKind::kQp, 2, "rxe1", {UserEntry(1, 1)}));
  }();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("device index 2, the request named 1"));
  st = ParseOne(ResourceKind::kQp, ResourceMessage(ResourceKind::kCq, 1, "rxe0", {}));
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_RES_QP_GET reply: message type 0x140c"));
}

TEST(RestrackWireTest, UncleanNamesDropTheEntryAndAreCounted) {
  // A device name that is not UTF-8: every entry of that message is dropped.
  ResourceDumpParser p(ResourceKind::kQp, std::nullopt);
  ASSERT_TRUE(p.OnMessage(ResourceMessage(ResourceKind::kQp, 1, "rxe\xff",
                                          {UserEntry(1, 5), UserEntry(2, 5)}))
                  .ok());
  // A kernel owner name with a control character: that entry only.
  ASSERT_TRUE(p.OnMessage(ResourceMessage(ResourceKind::kQp, 2, "rxe1",
                                          {KernelEntryOf(1, "ib\x1b[2Jcore"), UserEntry(9, 6)}))
                  .ok());
  EXPECT_THAT(p.resources(), ElementsAre(Res(ResourceKind::kQp, "rxe1", 0, 9, 6)));
  EXPECT_EQ(p.rejected(), 3u);
  EXPECT_EQ(p.entries_seen(), 4u);
  ASSERT_EQ(p.reasons().size(), 3u);
  EXPECT_THAT(p.reasons()[0], HasSubstr("RDMA device name \"rxe\\xff\" is not valid UTF-8"));
  EXPECT_THAT(p.reasons()[2], HasSubstr("contains a control character"));
  // Escaped: the reason itself is clean text.
  for (const std::string& r : p.reasons()) EXPECT_EQ(r.find('\x1b'), std::string::npos);
  // An empty device name is refused too.
  ResourceDumpParser q(ResourceKind::kQp, std::nullopt);
  ASSERT_TRUE(q.OnMessage(ResourceMessage(ResourceKind::kQp, 1, "", {UserEntry(1, 5)})).ok());
  EXPECT_EQ(q.rejected(), 1u);
}

TEST(RestrackWireTest, AttributesOfNewerKernelsAreSkipped) {
  MessageBuilder m(MessageType(ResourceKind::kMr), 0, 0);
  mnl_attr_put(m.nlh(), RDMA_NLDEV_ATTR_PAD, 0, nullptr);  // nla_put_u64_64bit's pad
  m.Handle(4, "rxe0");
  mnl_attr_put_u32(m.nlh(), 250, 1);  // an attribute this header does not know
  nlattr* table = mnl_attr_nest_start(m.nlh(), kResMr);
  mnl_attr_put_u32(m.nlh(), 251, 0);  // not an entry
  nlattr* entry = mnl_attr_nest_start(m.nlh(), kResMrEntry);
  mnl_attr_put(m.nlh(), RDMA_NLDEV_ATTR_PAD, 0, nullptr);
  mnl_attr_put_u64(m.nlh(), kMrlen, 12345);
  nlattr* driver = mnl_attr_nest_start(m.nlh(), RDMA_NLDEV_ATTR_DRIVER);
  mnl_attr_put_strz(m.nlh(), RDMA_NLDEV_ATTR_DRIVER_STRING, "anything");
  mnl_attr_nest_end(m.nlh(), driver);
  mnl_attr_put_u32(m.nlh(), kPid, 31);
  mnl_attr_nest_end(m.nlh(), entry);
  mnl_attr_nest_end(m.nlh(), table);
  RdmaResource want = Res(ResourceKind::kMr, "rxe0", 0, 0, 31, "", 12345);
  want.pdn.reset();  // this entry names no PD
  EXPECT_THAT(ParseOk(ResourceKind::kMr, {m.Bytes()}), ElementsAre(want));
}

// Builds a QP message whose one entry holds `put`'s attributes.
template <typename F>
std::string QpMessageWith(F put) {
  MessageBuilder m(MessageType(ResourceKind::kQp), 0, 0);
  m.Handle(1, "rxe0");
  nlattr* table = mnl_attr_nest_start(m.nlh(), kResQp);
  nlattr* entry = mnl_attr_nest_start(m.nlh(), kResQpEntry);
  put(m.nlh());
  mnl_attr_nest_end(m.nlh(), entry);
  mnl_attr_nest_end(m.nlh(), table);
  return m.Bytes();
}

// Issue 32, item 15: what a resource was made in. A user QP and MR name their
// PD, a user PD and CQ their device context, and the contexts are dumped with
// their owners (Linux 5.14+). A QP whose creating thread has exited has no PID
// but still its PD; the kernel links no kernel resource.
TEST(RestrackWireTest, OwnerLinksPdAndContext) {
  KernelEntry orphan = UserEntry(17, 0, 1);  // created by a thread that has exited
  orphan.pdn = 3;
  KernelEntry gsi = GsiEntry(1);
  gsi.pdn = 9;  // ignored: the builder, as the kernel, writes no link for it
  std::vector<RdmaResource> qps =
      ParseOk(ResourceKind::kQp, {ResourceMessage(ResourceKind::kQp, 1, "rxe0", {gsi, orphan})});
  ASSERT_EQ(qps.size(), 2u);
  EXPECT_FALSE(qps[0].pdn.has_value());
  EXPECT_EQ(qps[1].pid, 0u);
  EXPECT_EQ(qps[1].kern_name, "");
  EXPECT_EQ(qps[1].pdn, 3u);
  EXPECT_FALSE(qps[1].ctxn.has_value());

  KernelEntry pd = UserEntry(3, 0);
  pd.ctxn = 5;
  std::vector<RdmaResource> pds =
      ParseOk(ResourceKind::kPd, {ResourceMessage(ResourceKind::kPd, 1, "rxe0", {pd})});
  ASSERT_EQ(pds.size(), 1u);
  EXPECT_EQ(pds[0].id, 3u);
  EXPECT_EQ(pds[0].ctxn, 5u);
  EXPECT_FALSE(pds[0].pdn.has_value()) << "a PD's own number is its id";

  KernelEntry cq = UserEntry(2, 0);
  cq.ctxn = 5;
  EXPECT_EQ(
      ParseOk(ResourceKind::kCq, {ResourceMessage(ResourceKind::kCq, 1, "rxe0", {cq})})[0].ctxn,
      5u);
  KernelEntry mr = UserEntry(4, 0, 0, 8192);
  mr.pdn = 3;
  EXPECT_EQ(
      ParseOk(ResourceKind::kMr, {ResourceMessage(ResourceKind::kMr, 1, "rxe0", {mr})})[0].pdn, 3u);

  // RDMA_NLDEV_CMD_RES_CTX_GET: RES_CTX { RES_CTX_ENTRY { RES_CTXN, RES_PID } }.
  KernelEntry ctx = UserEntry(5, 164);
  std::vector<RdmaResource> ctxs =
      ParseOk(ResourceKind::kCtx, {ResourceMessage(ResourceKind::kCtx, 1, "rxe0", {ctx})});
  ASSERT_EQ(ctxs.size(), 1u);
  EXPECT_EQ(ctxs[0].kind, ResourceKind::kCtx);
  EXPECT_EQ(ctxs[0].id, 5u);
  EXPECT_EQ(ctxs[0].pid, 164u);
  EXPECT_FALSE(ctxs[0].ctxn.has_value()) << "a context's own number is its id";
  EXPECT_STREQ(CommandName(ResourceKind::kCtx), "RDMA_NLDEV_CMD_RES_CTX_GET");
  EXPECT_STREQ(ResourceKindName(ResourceKind::kCtx), "ctx");

  // A repeated link is malformed, as every other attribute.
  std::string twice = QpMessageWith([](nlmsghdr* nlh) {
    mnl_attr_put_u32(nlh, kLqpn, 17);
    mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_RES_PDN, 3);
    mnl_attr_put_u32(nlh, RDMA_NLDEV_ATTR_RES_PDN, 4);
  });
  EXPECT_THAT(ParseOne(ResourceKind::kQp, twice).message(),
              HasSubstr("RDMA_NLDEV_ATTR_RES_PDN repeated"));
}

TEST(RestrackWireTest, WrongSizesAreMalformed) {
  absl::Status st = ParseOne(ResourceKind::kQp, QpMessageWith([](nlmsghdr* n) {
                               mnl_attr_put_u64(n, kLqpn, 17);  // u64 where the kernel puts u32
                             }));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_RES_QP_GET reply: RDMA_NLDEV_ATTR_RES_LQPN"));
  EXPECT_THAT(st.message(), HasSubstr("has 8 payload bytes, expected 4"));
  st = ParseOne(ResourceKind::kQp,
                QpMessageWith([](nlmsghdr* n) { mnl_attr_put_u16(n, kPid, 17); }));
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_ATTR_RES_PID"));
  EXPECT_THAT(st.message(), HasSubstr("expected 4"));

  MessageBuilder mr(MessageType(ResourceKind::kMr), 0, 0);
  mr.Handle(1, "rxe0");
  nlattr* table = mnl_attr_nest_start(mr.nlh(), kResMr);
  nlattr* entry = mnl_attr_nest_start(mr.nlh(), kResMrEntry);
  mnl_attr_put_u32(mr.nlh(), kMrlen, 4096);  // u32 where the kernel puts u64
  mnl_attr_nest_end(mr.nlh(), entry);
  mnl_attr_nest_end(mr.nlh(), table);
  st = ParseOne(ResourceKind::kMr, mr.Bytes());
  EXPECT_THAT(st.message(),
              HasSubstr("RDMA_NLDEV_CMD_RES_MR_GET reply: RDMA_NLDEV_ATTR_RES_MRLEN"));
  EXPECT_THAT(st.message(), HasSubstr("expected 8"));

  MessageBuilder dev(MessageType(ResourceKind::kQp), 0, 0);
  mnl_attr_put_u8(dev.nlh(), kDevIndex, 1);
  mnl_attr_put_strz(dev.nlh(), kDevName, "rxe0");
  EXPECT_THAT(ParseOne(ResourceKind::kQp, dev.Bytes()).message(),
              HasSubstr("RDMA_NLDEV_ATTR_DEV_INDEX at byte 16 has 1 payload bytes, expected 4"));
}

TEST(RestrackWireTest, UnterminatedStringsRepeatsAndMissingHandleAreMalformed) {
  MessageBuilder m(MessageType(ResourceKind::kQp), 0, 0);
  mnl_attr_put_u32(m.nlh(), kDevIndex, 1);
  mnl_attr_put(m.nlh(), kDevName, 4, "rxe0");  // no NUL
  EXPECT_THAT(ParseOne(ResourceKind::kQp, m.Bytes()).message(),
              HasSubstr("RDMA_NLDEV_ATTR_DEV_NAME at byte 24 is not NUL-terminated"));

  EXPECT_THAT(ParseOne(ResourceKind::kQp,
                       QpMessageWith([](nlmsghdr* n) { mnl_attr_put(n, kKernName, 7, "ib_core"); }))
                  .message(),
              HasSubstr("RDMA_NLDEV_ATTR_RES_KERN_NAME at byte 44 is not NUL-terminated"));

  EXPECT_THAT(ParseOne(ResourceKind::kQp, QpMessageWith([](nlmsghdr* n) {
                         mnl_attr_put_u32(n, kLqpn, 1);
                         mnl_attr_put_u32(n, kLqpn, 2);
                       }))
                  .message(),
              HasSubstr("RDMA_NLDEV_ATTR_RES_LQPN repeated"));

  EXPECT_THAT(ParseOne(ResourceKind::kQp, QpMessageWith([](nlmsghdr* n) {
                         mnl_attr_put_u32(n, kPid, 1);
                         mnl_attr_put_strz(n, kKernName, "ib_core");
                       }))
                  .message(),
              HasSubstr("both RDMA_NLDEV_ATTR_RES_PID and RDMA_NLDEV_ATTR_RES_KERN_NAME"));

  MessageBuilder no_index(MessageType(ResourceKind::kQp), 0, 0);
  mnl_attr_put_strz(no_index.nlh(), kDevName, "rxe0");
  EXPECT_THAT(ParseOne(ResourceKind::kQp, no_index.Bytes()).message(),
              HasSubstr("no RDMA_NLDEV_ATTR_DEV_INDEX"));

  MessageBuilder two_tables(MessageType(ResourceKind::kQp), 0, 0);
  two_tables.Handle(1, "rxe0");
  two_tables.Table(ResourceKind::kQp, {});
  two_tables.Table(ResourceKind::kQp, {});
  EXPECT_THAT(ParseOne(ResourceKind::kQp, two_tables.Bytes()).message(),
              HasSubstr("RDMA_NLDEV_ATTR_RES_QP repeated"));
}

TEST(RestrackWireTest, NestedLengthsThatOverflowTheirParent) {
  // The entry claims 200 bytes more than the table holds.
  std::string m = ResourceMessage(ResourceKind::kQp, 1, "rxe0", {UserEntry(17, 164, 1)});
  // Layout: header 16, DEV_INDEX 8 (16..24), DEV_NAME "rxe0\0" 12 (24..36),
  // RES_QP header at 36, first entry header at 40.
  uint16_t len;
  std::memcpy(&len, m.data() + 40, 2);
  ASSERT_EQ(m[42], kResQpEntry);
  len += 200;
  std::memcpy(m.data() + 40, &len, 2);
  absl::Status st = ParseOne(ResourceKind::kQp, m);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_RES_QP_GET reply: attribute 20 at byte 40"));
  EXPECT_THAT(st.message(), HasSubstr("(truncated)"));

  // The table claims more than the message holds.
  m = ResourceMessage(ResourceKind::kQp, 1, "rxe0", {UserEntry(17, 164, 1)});
  std::memcpy(&len, m.data() + 36, 2);
  len += 4;
  std::memcpy(m.data() + 36, &len, 2);
  EXPECT_THAT(ParseOne(ResourceKind::kQp, m).message(),
              HasSubstr("RDMA_NLDEV_ATTR_RES_QP at byte 36 claims"));

  // An attribute shorter than its own header.
  m = ResourceMessage(ResourceKind::kQp, 1, "rxe0", {UserEntry(17, 164, 1)});
  len = 2;
  std::memcpy(m.data() + 44, &len, 2);
  EXPECT_THAT(ParseOne(ResourceKind::kQp, m).message(),
              HasSubstr("attribute at byte 44 has length 2"));

  // The message's own length past the bytes there are.
  m = ResourceMessage(ResourceKind::kQp, 1, "rxe0", {});
  EXPECT_THAT(ParseOne(ResourceKind::kQp, m.substr(0, m.size() - 4)).message(),
              HasSubstr("message length"));
}

// Every prefix of a valid message, with nlmsg_len cut to match (what a
// kernel bug or a hostile peer could send): an error naming the command, or
// entries that the whole message also has, in order. Never a crash.
TEST(RestrackWireTest, TruncatedAtEveryByte) {
  for (ResourceKind kind :
       {ResourceKind::kQp, ResourceKind::kCq, ResourceKind::kMr, ResourceKind::kPd}) {
    const std::string full = ResourceMessage(
        kind, 1, "rxe0",
        {KernelEntryOf(1, "ib_core", 1), UserEntry(17, 164, 1, 4096), UserEntry(18, 166, 1, 8192)});
    const std::vector<RdmaResource> all = ParseOk(kind, {full});
    ASSERT_EQ(all.size(), 3u);
    int errors = 0;
    for (size_t cut = 0; cut < full.size(); ++cut) {
      std::string part = full.substr(0, cut);
      if (cut >= 4) {
        const uint32_t len = static_cast<uint32_t>(cut);
        std::memcpy(part.data(), &len, 4);
      }
      ResourceDumpParser p(kind, 1);
      absl::Status st = p.OnMessage(part);
      if (!st.ok()) {
        ++errors;
        EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << cut;
        EXPECT_THAT(st.message(), HasSubstr(CommandName(kind))) << cut;
        continue;
      }
      ASSERT_LE(p.resources().size(), all.size()) << cut;
      for (size_t i = 0; i < p.resources().size(); ++i) EXPECT_EQ(p.resources()[i], all[i]) << cut;
    }
    EXPECT_GT(errors, static_cast<int>(full.size()) / 2);
    // The same cuts as received datagrams (nlmsg_len intact) are refused whole.
    for (size_t cut = 0; cut < full.size(); ++cut) {
      ResourceDumpParser p(kind, 1);
      FeedResult r = FeedBuffer(full.substr(0, cut), 0, 0, p, CommandName(kind));
      if (cut == 0) {
        EXPECT_EQ(r.state, FeedResult::State::kMore);
        continue;
      }
      EXPECT_EQ(r.state, FeedResult::State::kFailed) << cut;
      EXPECT_TRUE(p.resources().empty());
    }
  }
}

TEST(RestrackWireTest, EntryCountIsCapped) {
  std::vector<KernelEntry> entries;
  for (uint32_t i = 0; i < 11; ++i) entries.push_back(UserEntry(i, 1));
  ResourceDumpParser p(ResourceKind::kQp, std::nullopt, 10);
  absl::Status st = p.OnMessage(ResourceMessage(ResourceKind::kQp, 1, "rxe0", entries));
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(),
              HasSubstr("RDMA_NLDEV_CMD_RES_QP_GET dump: more than 10 entries; refusing it"));
  // Across messages too, and the default bound is a million.
  ResourceDumpParser q(ResourceKind::kQp, std::nullopt, 10);
  ASSERT_TRUE(q.OnMessage(ResourceMessage(ResourceKind::kQp, 1, "rxe0",
                                          {entries.begin(), entries.begin() + 6}))
                  .ok());
  EXPECT_EQ(q.OnMessage(ResourceMessage(ResourceKind::kQp, 1, "rxe0",
                                        {entries.begin(), entries.begin() + 5}))
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(kMaxEntriesPerDump, 1000000u);
}

TEST(RestrackWireTest, DeviceList) {
  DeviceListParser p;
  ASSERT_TRUE(p.OnMessage(testing::DeviceMessage(1, "rxe0")).ok());
  ASSERT_TRUE(p.OnMessage(testing::DeviceMessage(7, "mlx5_3")).ok());
  EXPECT_THAT(p.devices(), ElementsAre(DeviceHandle{1, "rxe0"}, DeviceHandle{7, "mlx5_3"}));
  MessageBuilder no_name(DeviceListMessageType(), 0, 0);
  mnl_attr_put_u32(no_name.nlh(), kDevIndex, 3);
  absl::Status st = p.OnMessage(no_name.Bytes());
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_GET reply: no RDMA_NLDEV_ATTR_DEV_NAME"));
  EXPECT_THAT(p.OnMessage(ResourceMessage(ResourceKind::kQp, 1, "rxe0", {})).message(),
              HasSubstr("message type 0x140a, expected 0x1401"));
}

struct Collect : MessageSink {
  std::vector<std::string> messages;
  absl::Status OnMessage(absl::string_view m) override {
    messages.emplace_back(m);
    return absl::OkStatus();
  }
};

TEST(RestrackWireTest, FeedBufferFramesDoneErrorsAndInterruptions) {
  const std::string a = ResourceMessage(ResourceKind::kQp, 1, "rxe0", {UserEntry(1, 2)}, 9, 77);
  const std::string b = ResourceMessage(ResourceKind::kQp, 1, "rxe0", {UserEntry(3, 4)}, 9, 77);
  ResourceDumpParser p(ResourceKind::kQp, 1);
  EXPECT_EQ(FeedBuffer(a + b, 9, 77, p, "x").state, FeedResult::State::kMore);
  EXPECT_EQ(FeedBuffer(testing::DoneMessage(0, 9, 77), 9, 77, p, "x").state,
            FeedResult::State::kDone);
  EXPECT_EQ(p.resources().size(), 2u);

  // The dump's failure in NLMSG_DONE (Linux 4.14+), or NLMSG_ERROR.
  Collect c;
  FeedResult r = FeedBuffer(a + testing::DoneMessage(-EINVAL, 9, 77), 9, 77, c, "x");
  EXPECT_EQ(r.state, FeedResult::State::kKernelError);
  EXPECT_EQ(r.kernel_errno, EINVAL);
  EXPECT_EQ(c.messages.size(), 1u);
  r = FeedBuffer(testing::ErrorMessage(-EOPNOTSUPP, 9, 77), 9, 77, c, "x");
  EXPECT_EQ(r.state, FeedResult::State::kKernelError);
  EXPECT_EQ(r.kernel_errno, EOPNOTSUPP);
  EXPECT_EQ(FeedBuffer(testing::ErrorMessage(0, 9, 77), 9, 77, c, "x").state,
            FeedResult::State::kDone);  // a plain ack
  r = FeedBuffer(testing::ErrorMessage(INT32_MIN, 9, 77), 9, 77, c, "x");
  EXPECT_EQ(r.state, FeedResult::State::kFailed);

  // NLM_F_DUMP_INTR
  std::string intr = a;
  uint16_t flags = NLM_F_MULTI | NLM_F_DUMP_INTR;
  std::memcpy(intr.data() + 6, &flags, 2);
  EXPECT_EQ(FeedBuffer(intr, 9, 77, c, "x").state, FeedResult::State::kInterrupted);

  // Another request's or another port's answer.
  r = FeedBuffer(a, 10, 77, c, "RDMA_NLDEV_CMD_RES_QP_GET");
  EXPECT_EQ(r.state, FeedResult::State::kFailed);
  EXPECT_THAT(r.error.message(), HasSubstr("another request than sequence 10"));
  r = FeedBuffer(a, 9, 78, c, "x");
  EXPECT_THAT(r.error.message(), HasSubstr("another netlink port"));

  // Framing: stray bytes, and a length libmnl would read as negative.
  r = FeedBuffer(a + "xyz", 9, 77, c, "RDMA_NLDEV_CMD_RES_QP_GET");
  EXPECT_EQ(r.state, FeedResult::State::kFailed);
  EXPECT_THAT(r.error.message(), HasSubstr("RDMA_NLDEV_CMD_RES_QP_GET reply: 3 stray bytes"));
  std::string huge = a;
  const uint32_t len = 0xFFFFFFF0u;
  std::memcpy(huge.data(), &len, 4);
  EXPECT_EQ(FeedBuffer(huge, 9, 77, c, "x").state, FeedResult::State::kFailed);

  // A sink's error stops the buffer.
  ResourceDumpParser wrong(ResourceKind::kCq, 1);
  r = FeedBuffer(a, 9, 77, wrong, "x");
  EXPECT_EQ(r.state, FeedResult::State::kFailed);
  EXPECT_THAT(r.error.message(), HasSubstr("RDMA_NLDEV_CMD_RES_CQ_GET reply: message type"));
}

TEST(RestrackWireTest, FeedBufferTakesUnalignedBuffers) {
  const std::string a = ResourceMessage(ResourceKind::kPd, 1, "rxe0", {UserEntry(1, 2)});
  std::string shifted = "x" + a;
  ResourceDumpParser p(ResourceKind::kPd, 1);
  EXPECT_EQ(FeedBuffer(absl::string_view(shifted).substr(1), 0, 0, p, "x").state,
            FeedResult::State::kMore);
  EXPECT_THAT(p.resources(), ElementsAre(Res(ResourceKind::kPd, "rxe0", 0, 1, 2)));
}

TEST(RestrackWireTest, KernelErrorsNameTheErrno) {
  absl::Status st = KernelErrorStatus(EOPNOTSUPP, "RDMA_NLDEV_CMD_RES_QP_GET for RDMA device rxe0");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_RES_QP_GET for RDMA device rxe0: the kernel "
                                      "answered EOPNOTSUPP (Operation not supported)"));
  EXPECT_EQ(KernelErrorStatus(EPERM, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(KernelErrorStatus(EINVAL, "x").message(), HasSubstr("EINVAL (Invalid argument)"));
  EXPECT_EQ(ErrnoName(ENOBUFS), "ENOBUFS");
  EXPECT_EQ(ErrnoName(99999), "errno 99999");
  EXPECT_THAT(KernelErrorStatus(99999, "x").message(), HasSubstr("errno 99999"));
}

}  // namespace
}  // namespace fabric::restrack::wire
