#include "agent/restrack/netlink_resource_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libmnl/libmnl.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/restrack/restrack_wire.h"
#include "test/fakes/restrack_test_util.h"

namespace fabric::restrack {
namespace {

using testing::DeviceMessage;
using testing::DoneMessage;
using ::testing::ElementsAre;
using testing::ErrorMessage;
using testing::GsiEntry;
using ::testing::HasSubstr;
using testing::KernelEntry;
using testing::KernelEntryOf;
using testing::Res;
using testing::ResourceMessage;
using testing::UserEntry;

constexpr ResourceKind kKinds[] = {ResourceKind::kQp, ResourceKind::kCq, ResourceKind::kMr,
                                   ResourceKind::kPd, ResourceKind::kCtx};

struct FakeDevice {
  uint32_t index = 0;
  std::string name;
  bool alive = true;
  std::map<ResourceKind, std::vector<KernelEntry>> resources;
};

// What the kernel does to one matching request (once per `times`).
struct Fault {
  enum class Type {
    kVanishMidDump,  // one message, then the device is gone: NLMSG_DONE(-EINVAL)
    kEnobufs,        // one message, then recv fails with ENOBUFS
    kDumpIntr,       // the first message is flagged NLM_F_DUMP_INTR
    kEintr,          // recv fails once with EINTR, then the answer
    kBusy,           // NLMSG_DONE(-EBUSY)
    kNoAnswer,       // nothing (recv times out: EAGAIN)
    kDeviceError,    // NLMSG_DONE(-EIO): the driver's ib_query_qp failed (a device in reset)
    kStale,          // a message of another request first
    kGarbage,        // a reply whose table overflows the message
  };
  Type type;
  ResourceKind kind;
  uint32_t index;
  int times = 1;
};

// The kernel's side of NETLINK_RDMA for the resource dumps, nldev.c's
// behaviour: a device list dump, and per (device, kind) dump the entries in
// messages of `per_message`, then NLMSG_DONE; an unknown device index is
// EINVAL in NLMSG_DONE; a command this "kernel" lacks is NLMSG_ERROR(-EINVAL).
class FakeKernel {
 public:
  std::vector<FakeDevice> devices;
  size_t per_message = 1000;
  std::map<ResourceKind, int> refuse;  // kind -> errno in NLMSG_ERROR
  std::vector<Fault> faults;
  // RDMA_NLDEV_SYS_ATTR_NETNS_MODE: 1 shared (the default), 0 exclusive;
  // nullopt: a kernel before 5.2, without SYS_GET.
  std::optional<uint8_t> netns_mode = 1;
  int connections = 0;
  std::vector<std::string> requests;

  ConnectionFactory Factory() {
    return [this]() -> absl::StatusOr<std::unique_ptr<NetlinkConnection>> {
      ++connections;
      return std::unique_ptr<NetlinkConnection>(new Connection(this, 4000 + connections));
    };
  }

 private:
  struct Datagram {
    std::string bytes;
    int err = 0;
  };

  class Connection : public NetlinkConnection {
   public:
    Connection(FakeKernel* k, uint32_t portid) : k_(k), portid_(portid) {}
    uint32_t PortId() const override { return portid_; }
    int Send(const void* buf, size_t len) override {
      k_->Answer(static_cast<const char*>(buf), len, portid_, &queue_);
      return 0;
    }
    int Receive(void* buf, size_t len, size_t* received) override {
      if (queue_.empty()) return EAGAIN;
      Datagram d = std::move(queue_.front());
      queue_.pop_front();
      if (d.err != 0) return d.err;
      if (d.bytes.size() > len) return ENOSPC;
      std::memcpy(buf, d.bytes.data(), d.bytes.size());
      *received = d.bytes.size();
      return 0;
    }

   private:
    FakeKernel* k_;
    uint32_t portid_;
    std::deque<Datagram> queue_;
  };

  FakeDevice* Find(uint32_t index) {
    for (FakeDevice& d : devices) {
      if (d.index == index) return &d;
    }
    return nullptr;
  }

  std::optional<Fault> TakeFault(ResourceKind kind, uint32_t index) {
    for (Fault& f : faults) {
      if (f.kind == kind && f.index == index && f.times > 0) {
        --f.times;
        return f;
      }
    }
    return std::nullopt;
  }

  void Answer(const char* req, size_t len, uint32_t portid, std::deque<Datagram>* out) {
    nlmsghdr h;
    ASSERT_GE(len, sizeof(h));
    std::memcpy(&h, req, sizeof(h));
    const uint32_t seq = h.nlmsg_seq;
    const int op = h.nlmsg_type & 0x3ff;
    ASSERT_EQ(h.nlmsg_type >> 10, RDMA_NL_NLDEV);
    if (op == RDMA_NLDEV_CMD_SYS_GET) {  // nldev_sys_get_doit: one reply, then the ACK
      EXPECT_EQ(h.nlmsg_flags, NLM_F_REQUEST | NLM_F_ACK);
      requests.push_back("sys");
      if (!netns_mode) {
        out->push_back({ErrorMessage(-EOPNOTSUPP, seq, portid)});
        return;
      }
      testing::MessageBuilder m(h.nlmsg_type, seq, portid, 0);
      mnl_attr_put_u8(m.nlh(), RDMA_NLDEV_SYS_ATTR_NETNS_MODE, *netns_mode);
      out->push_back({m.Bytes() + ErrorMessage(0, seq, portid)});
      return;
    }
    EXPECT_EQ(h.nlmsg_flags, NLM_F_REQUEST | NLM_F_DUMP);
    if (op == RDMA_NLDEV_CMD_GET) {
      requests.push_back("list");
      for (const FakeDevice& d : devices) {
        if (d.alive) out->push_back({DeviceMessage(d.index, d.name, seq, portid)});
      }
      out->push_back({DoneMessage(0, seq, portid)});
      return;
    }
    ResourceKind kind = ResourceKind::kQp;
    for (ResourceKind k : kKinds) {
      if (wire::MessageType(k) == h.nlmsg_type) kind = k;
    }
    // nldev.c reads RDMA_NLDEV_ATTR_DEV_INDEX (u32) from the request.
    ASSERT_EQ(len, 24u);
    uint32_t index;
    std::memcpy(&index, req + 20, 4);
    requests.push_back(absl::StrCat(ResourceKindName(kind), "@", index));
    if (auto it = refuse.find(kind); it != refuse.end()) {
      out->push_back({ErrorMessage(-it->second, seq, portid)});
      return;
    }
    FakeDevice* dev = Find(index);
    if (dev == nullptr || !dev->alive) {
      out->push_back({DoneMessage(-EINVAL, seq, portid)});
      return;
    }
    std::vector<std::string> messages;
    const std::vector<KernelEntry>& all = dev->resources[kind];
    for (size_t i = 0; i < all.size(); i += per_message) {
      std::vector<KernelEntry> chunk(all.begin() + i,
                                     all.begin() + std::min(all.size(), i + per_message));
      messages.push_back(ResourceMessage(kind, index, dev->name, chunk, seq, portid));
    }
    std::optional<Fault> fault = TakeFault(kind, index);
    if (fault) {
      switch (fault->type) {
        case Fault::Type::kVanishMidDump:
          dev->alive = false;
          if (!messages.empty()) out->push_back({messages[0]});
          out->push_back({DoneMessage(-EINVAL, seq, portid)});
          return;
        case Fault::Type::kEnobufs:
          if (!messages.empty()) out->push_back({messages[0]});
          out->push_back({"", ENOBUFS});
          return;
        case Fault::Type::kDumpIntr:
          if (!messages.empty()) {
            uint16_t flags = NLM_F_MULTI | NLM_F_DUMP_INTR;
            std::memcpy(messages[0].data() + 6, &flags, 2);
          }
          break;
        case Fault::Type::kEintr:
          out->push_back({"", EINTR});
          break;
        case Fault::Type::kBusy:
          out->push_back({DoneMessage(-EBUSY, seq, portid)});
          return;
        case Fault::Type::kNoAnswer:
          return;
        case Fault::Type::kDeviceError:
          if (!messages.empty()) out->push_back({messages[0]});
          out->push_back({DoneMessage(-EIO, seq, portid)});
          return;
        case Fault::Type::kStale:
          out->push_back({ResourceMessage(kind, index, dev->name, {}, seq - 1, portid)});
          break;
        case Fault::Type::kGarbage: {
          std::string m = ResourceMessage(kind, index, dev->name, {UserEntry(1, 1)}, seq, portid);
          uint16_t table_len;
          std::memcpy(&table_len, m.data() + 36, 2);
          table_len += 64;
          std::memcpy(m.data() + 36, &table_len, 2);
          out->push_back({m});
          return;
        }
      }
    }
    // Two messages per datagram where there are two, as recv() may see them.
    for (size_t i = 0; i < messages.size(); i += 2) {
      std::string d = messages[i];
      if (i + 1 < messages.size()) d += messages[i + 1];
      out->push_back({d});
    }
    out->push_back({DoneMessage(0, seq, portid)});
  }
};

class NetlinkResourceSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeDevice rxe0;
    rxe0.index = 1;
    rxe0.name = "rxe0";
    rxe0.resources[ResourceKind::kQp] = {GsiEntry(1), UserEntry(17, 164, 1), UserEntry(18, 166, 1)};
    rxe0.resources[ResourceKind::kCq] = {KernelEntryOf(0, "ib_core"), UserEntry(1, 164),
                                         UserEntry(2, 166)};
    rxe0.resources[ResourceKind::kMr] = {UserEntry(1, 164, 0, 4096), UserEntry(2, 166, 0, 8192)};
    rxe0.resources[ResourceKind::kPd] = {KernelEntryOf(0, "ib_core"), UserEntry(1, 164),
                                         UserEntry(2, 166)};
    FakeDevice mlx;
    mlx.index = 3;
    mlx.name = "mlx5_0";
    mlx.resources[ResourceKind::kQp] = {UserEntry(200, 900, 1), UserEntry(201, 900, 1)};
    mlx.resources[ResourceKind::kMr] = {UserEntry(7, 900, 0, 1ULL << 34)};
    kernel_.devices = {rxe0, mlx};
    kernel_.per_message = 2;
  }

  std::vector<RdmaResource> Everything() const {
    return {Res(ResourceKind::kQp, "rxe0", 1, 1, 0, "ib_core"),
            Res(ResourceKind::kQp, "rxe0", 1, 17, 164),
            Res(ResourceKind::kQp, "rxe0", 1, 18, 166),
            Res(ResourceKind::kCq, "rxe0", 0, 0, 0, "ib_core"),
            Res(ResourceKind::kCq, "rxe0", 0, 1, 164),
            Res(ResourceKind::kCq, "rxe0", 0, 2, 166),
            Res(ResourceKind::kMr, "rxe0", 0, 1, 164, "", 4096),
            Res(ResourceKind::kMr, "rxe0", 0, 2, 166, "", 8192),
            Res(ResourceKind::kPd, "rxe0", 0, 0, 0, "ib_core"),
            Res(ResourceKind::kPd, "rxe0", 0, 1, 164),
            Res(ResourceKind::kPd, "rxe0", 0, 2, 166),
            Res(ResourceKind::kQp, "mlx5_0", 1, 200, 900),
            Res(ResourceKind::kQp, "mlx5_0", 1, 201, 900),
            Res(ResourceKind::kMr, "mlx5_0", 0, 7, 900, "", 1ULL << 34)};
  }

  std::unique_ptr<ResourceSource> Source(NetlinkSourceOptions options = {}) {
    return NewNetlinkResourceSource(kernel_.Factory(), options);
  }

  FakeKernel kernel_;
};

TEST_F(NetlinkResourceSourceTest, EveryKindOfEveryDevice) {
  auto source = Source();
  auto got = source->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Everything());
  EXPECT_EQ(kernel_.connections, 1);
  EXPECT_THAT(kernel_.requests, ElementsAre("sys", "list", "qp@1", "cq@1", "mr@1", "pd@1", "ctx@1",
                                            "qp@3", "cq@3", "mr@3", "pd@3", "ctx@3"));
  DumpNotes notes = source->LastDumpNotes();
  EXPECT_EQ(notes.rejected_entries, 0u);
  EXPECT_EQ(notes.vanished_devices, 0u);
  EXPECT_EQ(notes.retried_dumps, 0u);
  // A second Dump opens its own socket and sees the same.
  EXPECT_EQ(*source->Dump(), Everything());
  EXPECT_EQ(kernel_.connections, 2);
}

TEST_F(NetlinkResourceSourceTest, NoDevicesIsAnEmptyDump) {
  kernel_.devices.clear();
  auto got = Source()->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->empty());
}

TEST_F(NetlinkResourceSourceTest, ADeviceThatDisappearsMidDumpIsSkipped) {
  kernel_.faults.push_back({Fault::Type::kVanishMidDump, ResourceKind::kMr, 3});
  auto source = Source();
  auto got = source->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<RdmaResource> want = Everything();
  want.resize(11);  // rxe0's only: mlx5_0's QPs went with it
  EXPECT_EQ(*got, want);
  EXPECT_EQ(source->LastDumpNotes().vanished_devices, 1u);
  EXPECT_THAT(kernel_.requests, ElementsAre("sys", "list", "qp@1", "cq@1", "mr@1", "pd@1", "ctx@1",
                                            "qp@3", "cq@3", "mr@3", "list"));
}

// A refusal for every device is no device's own failure: the whole Dump fails.
TEST_F(NetlinkResourceSourceTest, AKernelWithoutTheDumpIsUnimplemented) {
  kernel_.refuse[ResourceKind::kCq] = EINVAL;  // Linux 4.16/4.17: QP dumps only
  absl::Status st = Source()->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_RES_CQ_GET for RDMA device rxe0 (index 1): "
                                      "the kernel answered EINVAL"));
  EXPECT_THAT(st.message(), HasSubstr("the device still exists"));

  kernel_.refuse.clear();
  kernel_.refuse[ResourceKind::kQp] = EOPNOTSUPP;
  st = Source()->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_RES_QP_GET for RDMA device rxe0 (index 1): "
                                      "the kernel answered EOPNOTSUPP (Operation not supported)"));

  kernel_.refuse[ResourceKind::kQp] = EPERM;
  st = Source()->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(), HasSubstr("EPERM"));
}

// Issue 32, item 15: the device contexts come with the rest (Linux 5.14+),
// each with its owner; a kernel without the dump (nldev answers EINVAL for a
// command it lacks) costs only the contexts, asked for once per Dump.
TEST_F(NetlinkResourceSourceTest, ContextsAreDumpedWhereTheKernelHasThem) {
  kernel_.devices[0].resources[ResourceKind::kCtx] = {UserEntry(0, 164), UserEntry(1, 0)};
  auto source = Source();
  auto got = source->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<RdmaResource> want = Everything();
  RdmaResource ctx0 = Res(ResourceKind::kCtx, "rxe0", 0, 0, 164);
  RdmaResource ctx1 = Res(ResourceKind::kCtx, "rxe0", 0, 1, 0);  // its opener has exited
  want.insert(want.begin() + 11, {ctx0, ctx1});
  EXPECT_EQ(*got, want);
  EXPECT_EQ(source->LastDumpNotes().contexts_missing, "");

  kernel_.requests.clear();
  kernel_.refuse[ResourceKind::kCtx] = EINVAL;
  got = source->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Everything());
  EXPECT_THAT(source->LastDumpNotes().contexts_missing,
              HasSubstr("RDMA_NLDEV_CMD_RES_CTX_GET for RDMA device rxe0 (index 1): the kernel "
                        "answered EINVAL"));
  EXPECT_THAT(kernel_.requests, ElementsAre("sys", "list", "qp@1", "cq@1", "mr@1", "pd@1", "ctx@1",
                                            "list", "qp@3", "cq@3", "mr@3", "pd@3"));
}

TEST_F(NetlinkResourceSourceTest, EintrOnReceiveIsRetriedInPlace) {
  kernel_.faults.push_back({Fault::Type::kEintr, ResourceKind::kQp, 1});
  auto source = Source();
  auto got = source->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Everything());
  EXPECT_EQ(kernel_.connections, 1);
  EXPECT_EQ(source->LastDumpNotes().retried_dumps, 0u);
}

TEST_F(NetlinkResourceSourceTest, OverrunInterruptedOrBusyDumpsRestartOnAFreshSocket) {
  for (Fault::Type type : {Fault::Type::kEnobufs, Fault::Type::kDumpIntr, Fault::Type::kBusy}) {
    SetUp();
    kernel_.connections = 0;
    kernel_.faults = {{type, ResourceKind::kQp, 1}, {type, ResourceKind::kPd, 1}};
    auto source = Source();
    auto got = source->Dump();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, Everything()) << "no entry twice, none lost";
    EXPECT_EQ(kernel_.connections, 3);
    EXPECT_EQ(source->LastDumpNotes().retried_dumps, 2u);
  }
}

TEST_F(NetlinkResourceSourceTest, RestartsAreBounded) {
  kernel_.faults.push_back({Fault::Type::kEnobufs, ResourceKind::kMr, 3, 10});
  absl::Status st = Source()->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_RES_MR_GET for RDMA device mlx5_0 (index 3): "
                                      "the socket's receive buffer overran (ENOBUFS) on each of 3 "
                                      "attempts"));
  // A device busy on every attempt is that device's failure: the others count.
  kernel_.faults = {{Fault::Type::kBusy, ResourceKind::kQp, 1, 10}};
  auto source = Source();
  auto got = source->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<RdmaResource> want = Everything();
  want.erase(want.begin(), want.begin() + 11);  // mlx5_0's only
  EXPECT_EQ(*got, want);
  DumpNotes notes = source->LastDumpNotes();
  ASSERT_EQ(notes.failed_devices.count("rxe0"), 1u);
  EXPECT_THAT(notes.failed_devices["rxe0"], HasSubstr("EBUSY"));
}

TEST_F(NetlinkResourceSourceTest, ADeviceTheKernelCannotDumpCostsOnlyItsOwnResources) {
  // The driver's ib_query_qp fails for a device in reset: nldev ends that
  // device's QP dump with the error, after what it had written.
  kernel_.faults.push_back({Fault::Type::kDeviceError, ResourceKind::kQp, 1});
  auto source = Source();
  auto got = source->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<RdmaResource> want = Everything();
  want.erase(want.begin(), want.begin() + 11);  // rxe0's partial answer is dropped
  EXPECT_EQ(*got, want);
  DumpNotes notes = source->LastDumpNotes();
  EXPECT_EQ(notes.vanished_devices, 0u);
  ASSERT_EQ(notes.failed_devices.size(), 1u);
  EXPECT_THAT(notes.failed_devices["rxe0"],
              HasSubstr("RDMA_NLDEV_CMD_RES_QP_GET for RDMA device rxe0 (index 1): the kernel "
                        "answered EIO"));
  // The device was asked once more whether it still exists, then skipped.
  EXPECT_THAT(kernel_.requests,
              ElementsAre("sys", "list", "qp@1", "list", "qp@3", "cq@3", "mr@3", "pd@3", "ctx@3"));
  // The next Dump starts clean.
  EXPECT_EQ(*source->Dump(), Everything());
  EXPECT_TRUE(source->LastDumpNotes().failed_devices.empty());
}

TEST_F(NetlinkResourceSourceTest, NoAnswerIsADeadline) {
  kernel_.faults.push_back({Fault::Type::kNoAnswer, ResourceKind::kCq, 1});
  absl::Status st = Source()->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(st.message(), HasSubstr("RDMA_NLDEV_CMD_RES_CQ_GET for RDMA device rxe0 (index 1): "
                                      "the kernel did not answer in time (EAGAIN"));
}

TEST_F(NetlinkResourceSourceTest, MalformedOrForeignRepliesFailTheDump) {
  kernel_.faults.push_back({Fault::Type::kGarbage, ResourceKind::kPd, 3});
  absl::Status st = Source()->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(),
              HasSubstr("RDMA_NLDEV_CMD_RES_PD_GET for RDMA device mlx5_0 (index 3) reply: "
                        "RDMA_NLDEV_ATTR_RES_PD at byte 36 claims"));
  kernel_.faults = {{Fault::Type::kStale, ResourceKind::kQp, 1}};
  st = Source()->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("a message for another request"));
}

TEST_F(NetlinkResourceSourceTest, UncleanNamesAreDroppedAndCounted) {
  kernel_.devices[1].name = "mlx5_\xc0\xaf";  // overlong '/': not UTF-8
  kernel_.devices[0].resources[ResourceKind::kQp].push_back(KernelEntryOf(2, "rdma\ncm", 1));
  auto source = Source();
  auto got = source->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  std::vector<RdmaResource> want = Everything();
  want.resize(11);
  EXPECT_EQ(*got, want);
  DumpNotes notes = source->LastDumpNotes();
  EXPECT_EQ(notes.rejected_entries, 4u);  // 1 kern_name + mlx5's 2 QPs and 1 MR
  ASSERT_FALSE(notes.reasons.empty());
  EXPECT_THAT(notes.reasons[0], HasSubstr("kernel owner name \"rdma\\x0acm\" contains a control"));
  EXPECT_THAT(notes.reasons[1],
              HasSubstr("RDMA device name \"mlx5_\\xc0\\xaf\" is not valid UTF-8"));
}

TEST_F(NetlinkResourceSourceTest, TheEntryBoundSpansDevicesAndKinds) {
  NetlinkSourceOptions options;
  options.max_entries = 12;
  absl::Status st = Source(options)->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(
      st.message(),
      HasSubstr(
          "RDMA_NLDEV_CMD_RES_QP_GET for RDMA device mlx5_0 (index 3) dump: more than 1 entries"));
  options.max_entries = 14;
  EXPECT_TRUE(Source(options)->Dump().ok());
}

// The exclusive RDMA netns mode hides every device not bound to this netns:
// an empty dump would read as "nobody uses the fabric", so it is refused.
TEST_F(NetlinkResourceSourceTest, TheExclusiveNetnsModeIsNotObservable) {
  kernel_.netns_mode = 0;
  absl::Status st = Source()->Dump().status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("the kernel's RDMA netns mode is exclusive"));
  EXPECT_THAT(kernel_.requests, ElementsAre("sys"));
  // A kernel without the mode (before 5.2) is shared.
  kernel_.netns_mode.reset();
  auto got = Source()->Dump();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, Everything());
}

TEST_F(NetlinkResourceSourceTest, ASocketThatCannotBeOpenedFailsTheDump) {
  auto source =
      NewNetlinkResourceSource([]() -> absl::StatusOr<std::unique_ptr<NetlinkConnection>> {
        return absl::UnavailableError("open NETLINK_RDMA socket: EPROTONOSUPPORT");
      });
  EXPECT_EQ(source->Dump().status().code(), absl::StatusCode::kUnavailable);
}

// On this machine: a kernel without ib_core answers kUnavailable, one with it
// a dump; nothing else.
TEST(RealNetlinkTest, OpensOrSaysWhyNot) {
  auto got = OpenNetlinkResourceSource()->Dump();
  if (!got.ok()) {
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
    EXPECT_THAT(got.status().message(), HasSubstr("NETLINK_RDMA"));
    return;
  }
  for (const RdmaResource& r : *got) {
    EXPECT_FALSE(r.device.empty());
    EXPECT_TRUE(r.pid == 0 || r.kern_name.empty());
  }
}

}  // namespace
}  // namespace fabric::restrack
