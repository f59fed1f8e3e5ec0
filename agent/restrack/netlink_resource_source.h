// The real ResourceSource: per Dump(), a NETLINK_RDMA socket (libmnl) lists
// the devices (RDMA_NLDEV_CMD_GET) and dumps each one's QPs, CQs, MRs and PDs
// (RDMA_NLDEV_CMD_RES_*_GET with its index), the way `rdma res show` does.
//
// Failures it absorbs: EINTR on send/recv (retried at once); a dump the
// kernel marks NLM_F_DUMP_INTR, a receive-buffer overrun (ENOBUFS) or a
// transient kernel error (EAGAIN, EBUSY, EINTR) restart that one dump on a
// fresh socket, up to 3 times; a device that disappears between the list and
// its dumps (the kernel answers EINVAL for an unknown index) is skipped, its
// resources dropped, and counted in DumpNotes. A device whose dump the kernel
// refuses while it still exists (any errno but EINVAL: a driver whose
// ib_query_qp fails during a reset, EOPNOTSUPP; or transient errors on every
// attempt) is left out and named in DumpNotes::failed_devices: the other
// devices' resources are still returned. Everything else fails the whole
// Dump with the request and device named: EINVAL for a device that still
// exists (a kernel without that dump: kUnimplemented), a malformed reply,
// more than wire::kMaxEntriesPerDump entries, restarts on every attempt, no
// answer in time.
#ifndef FABRIC_AGENT_RESTRACK_NETLINK_RESOURCE_SOURCE_H_
#define FABRIC_AGENT_RESTRACK_NETLINK_RESOURCE_SOURCE_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/restrack/rdma_resources.h"

namespace fabric::restrack {

// The socket seam: one NETLINK_RDMA socket, bound. Tests script the kernel.
class NetlinkConnection {
 public:
  virtual ~NetlinkConnection() = default;
  // The port the kernel addresses replies to (nlmsg_pid).
  virtual uint32_t PortId() const = 0;
  // Sends one request: 0 or an errno.
  virtual int Send(const void* buf, size_t len) = 0;
  // Receives one datagram into `buf`: 0 with its size in `*received`, or an
  // errno (EAGAIN when the receive timeout passed, ENOSPC when the datagram
  // did not fit).
  virtual int Receive(void* buf, size_t len, size_t* received) = 0;
};

using ConnectionFactory = std::function<absl::StatusOr<std::unique_ptr<NetlinkConnection>>()>;

// A real connection: socket(AF_NETLINK, NETLINK_RDMA) in the caller's network
// namespace, with `receive_timeout` on every recv. kUnavailable when the
// kernel has no RDMA netlink (ib_core not loaded).
absl::StatusOr<std::unique_ptr<NetlinkConnection>> OpenNetlinkConnection(
    absl::Duration receive_timeout = absl::Seconds(5));

struct NetlinkSourceOptions {
  // One Dump() as a whole; past it the Dump fails with kDeadlineExceeded.
  absl::Duration dump_timeout = absl::Seconds(30);
  // Attempts per (device, kind) dump for the restartable failures.
  int attempts = 3;
  // Entries (all devices and kinds together) past which the Dump is refused.
  size_t max_entries = 1'000'000;  // wire::kMaxEntriesPerDump
};

// The source over any connection factory (OpenNetlinkResourceSource uses
// OpenNetlinkConnection).
std::unique_ptr<ResourceSource> NewNetlinkResourceSource(ConnectionFactory connect,
                                                         NetlinkSourceOptions options = {});

}  // namespace fabric::restrack

#endif  // FABRIC_AGENT_RESTRACK_NETLINK_RESOURCE_SOURCE_H_
