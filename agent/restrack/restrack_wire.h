// The RDMA netlink (NETLINK_RDMA, client RDMA_NL_NLDEV) messages of the
// resource dumps, apart from the socket so every byte is unit-tested and
// fuzzed without an RDMA kernel. Layout as iproute2 `rdma res` and the kernel
// (drivers/infiniband/core/nldev.c): no family header, attributes right after
// the nlmsghdr. A reply message of RDMA_NLDEV_CMD_RES_QP_GET is
//   DEV_INDEX (u32), DEV_NAME (string),
//   RES_QP (nested) { RES_QP_ENTRY (nested) { [PORT_INDEX u32] RES_LQPN u32
//                     ... RES_PID u32 | RES_KERN_NAME string ... } ... }
// and likewise RES_CQ/RES_CQ_ENTRY/RES_CQN, RES_MR/RES_MR_ENTRY/RES_MRN
// (+ RES_MRLEN u64), RES_PD/RES_PD_ENTRY/RES_PDN. A dump may span several
// messages; the kernel ends it with NLMSG_DONE, carrying an errno if it failed.
//
// The parsers trust nothing: every length is checked against its parent,
// sizes must be exact, strings terminated, names clean text; a malformed
// message is an error naming the command, never a throw or a crash.
#ifndef FABRIC_AGENT_RESTRACK_RESTRACK_WIRE_H_
#define FABRIC_AGENT_RESTRACK_RESTRACK_WIRE_H_

#include <linux/netlink.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "agent/restrack/rdma_resources.h"

namespace fabric::restrack::wire {

// A sanity bound on one Dump(): past it the dump is refused, not truncated.
inline constexpr size_t kMaxEntriesPerDump = 1'000'000;
// The same for the devices of one device list, and the messages of one dump.
inline constexpr size_t kMaxDevices = 65'536;
inline constexpr size_t kMaxMessagesPerDump = 1'000'000;
// Names: IB_DEVICE_NAME_MAX (64) for devices; kern_name is a task comm (16)
// or a module name, 64 is ample.
inline constexpr size_t kMaxNameBytes = 64;

// "RDMA_NLDEV_CMD_RES_QP_GET", ... for messages.
const char* CommandName(ResourceKind kind);
// The nlmsg_type of the kind's requests and replies:
// RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, RDMA_NLDEV_CMD_RES_*_GET).
uint16_t MessageType(ResourceKind kind);
// The same for RDMA_NLDEV_CMD_GET (the device list).
uint16_t DeviceListMessageType();

// Builders write one request into `buf` (at least MNL_SOCKET_BUFFER_SIZE
// bytes) and return it; the caller sets nlmsg_seq.
// RDMA_NLDEV_CMD_GET, NLM_F_REQUEST|NLM_F_DUMP (`rdma dev`): every device.
nlmsghdr* PutDeviceListDump(char* buf);
// RDMA_NLDEV_CMD_RES_*_GET, NLM_F_REQUEST|NLM_F_DUMP, RDMA_NLDEV_ATTR_DEV_INDEX
// (u32): the kernel dumps one device per request (nldev.c refuses a dump
// without an index with EINVAL), as `rdma res show qp` does per device.
nlmsghdr* PutResourceDump(char* buf, ResourceKind kind, uint32_t dev_index);

// The kernel's errno (from NLMSG_ERROR, or NLMSG_DONE of a failed dump) as a
// status: "<request>: the kernel answered EOPNOTSUPP (Operation not
// supported)". EOPNOTSUPP is kUnimplemented; others follow
// absl::ErrnoToStatusCode.
absl::Status KernelErrorStatus(int errno_value, absl::string_view request);
// "EOPNOTSUPP"; "errno 1234" for a number without a name.
std::string ErrnoName(int errno_value);

// Receives the data messages of one dump, one at a time.
class MessageSink {
 public:
  virtual ~MessageSink() = default;
  // `message` is exactly one netlink message (nlmsg_len bytes, at least a
  // header). An error stops the dump.
  virtual absl::Status OnMessage(absl::string_view message) = 0;
};

struct DeviceHandle {
  uint32_t index = 0;
  std::string name;  // as sent; may be unclean (checked where it is used)
  bool operator==(const DeviceHandle&) const = default;
};

// The replies of RDMA_NLDEV_CMD_GET: DEV_INDEX and DEV_NAME of each device.
class DeviceListParser : public MessageSink {
 public:
  // `what` names the request in errors.
  explicit DeviceListParser(std::string what = "RDMA_NLDEV_CMD_GET") : what_(std::move(what)) {}
  absl::Status OnMessage(absl::string_view message) override;
  const std::vector<DeviceHandle>& devices() const { return devices_; }

 private:
  std::string what_;
  std::vector<DeviceHandle> devices_;
};

// The replies of one RDMA_NLDEV_CMD_RES_*_GET dump, accumulated over its
// messages. Entries with an unclean device or kernel name are dropped and
// counted. `expected_dev_index`, when set, is the device the request named;
// a reply about another is malformed. More than `max_entries` entries
// (dropped ones included) is kResourceExhausted. Errors and reasons start
// with `what` (default: the command's name).
class ResourceDumpParser : public MessageSink {
 public:
  ResourceDumpParser(ResourceKind kind, std::optional<uint32_t> expected_dev_index,
                     size_t max_entries = kMaxEntriesPerDump, std::string what = {});
  absl::Status OnMessage(absl::string_view message) override;

  std::vector<RdmaResource>& resources() { return resources_; }
  size_t entries_seen() const { return entries_seen_; }
  uint32_t rejected() const { return rejected_; }
  const std::vector<std::string>& reasons() const { return reasons_; }

 private:
  ResourceKind kind_;
  std::optional<uint32_t> expected_dev_index_;
  std::string what_;
  size_t max_entries_;
  size_t messages_ = 0;
  size_t entries_seen_ = 0;
  uint32_t rejected_ = 0;
  std::vector<RdmaResource> resources_;
  std::vector<std::string> reasons_;
};

// What one receive buffer of a dump's reply came to.
struct FeedResult {
  enum class State {
    kMore,         // every message taken; the dump goes on in the next buffer
    kDone,         // NLMSG_DONE: the dump is complete
    kKernelError,  // NLMSG_ERROR or a failed NLMSG_DONE: kernel_errno
    kInterrupted,  // NLM_F_DUMP_INTR: the kernel's view changed; dump again
    kFailed,       // malformed, not ours, or refused by the sink: error
  };
  State state = State::kMore;
  int kernel_errno = 0;
  absl::Status error;
};

// Feeds one datagram (as recv() returned it: one or more netlink messages) to
// `sink`, framing through libmnl's mnl_cb_run2, which also refuses a message
// whose nlmsg_seq / nlmsg_pid is not `seq` / `portid` (0 turns either check
// off). The framing is checked first: a partial message is kFailed, not
// silently ignored. `what` names the request in errors.
FeedResult FeedBuffer(absl::string_view buffer, uint32_t seq, uint32_t portid, MessageSink& sink,
                      absl::string_view what);

}  // namespace fabric::restrack::wire

#endif  // FABRIC_AGENT_RESTRACK_RESTRACK_WIRE_H_
