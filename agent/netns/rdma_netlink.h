// RdmaNetlink: the RDMA subsystem's netns operations (what `rdma system` and
// `rdma dev set DEV netns NS` do). MnlRdmaNetlink is the real one (libmnl,
// rdma_netlink_mnl.h); FakeRdmaNetlink (test/fakes/) serves tests.
#ifndef FABRIC_AGENT_NETNS_RDMA_NETLINK_H_
#define FABRIC_AGENT_NETNS_RDMA_NETLINK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fabric::netns {

// ib_core netns_mode: shared (kernel default: every device in every netns) or
// exclusive (a device belongs to one netns).
enum class NetnsMode { kShared, kExclusive };

const char* NetnsModeName(NetnsMode mode);

struct RdmaLink {
  uint32_t index = 0;
  std::string name;
  bool operator==(const RdmaLink&) const = default;
};

class RdmaNetlink {
 public:
  virtual ~RdmaNetlink() = default;

  virtual absl::StatusOr<NetnsMode> GetNetnsMode() = 0;

  // RDMA devices visible from the netns at `netns_path` ("" = the agent's own,
  // host, netns). In exclusive mode that is exactly the devices bound to it.
  virtual absl::StatusOr<std::vector<RdmaLink>> ListDevices(const std::string& netns_path) = 0;

  // Moves `device` from netns `from_netns` to netns `to_netns` ("" = host).
  // The kernel's refusal comes back as an error naming the device, e.g.
  // kUnimplemented for EOPNOTSUPP (driver without netns support, or shared
  // mode), kNotFound if the device is not in `from_netns`.
  virtual absl::Status MoveDevice(const std::string& device, const std::string& from_netns,
                                  const std::string& to_netns) = 0;
};

}  // namespace fabric::netns

#endif  // FABRIC_AGENT_NETNS_RDMA_NETLINK_H_
