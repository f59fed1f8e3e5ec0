// Where the kernel has no RDMA netlink (old kernels, some sandboxes) or it
// cannot be opened: a stand-in whose every call fails kUnavailable with the
// reason, so the CNI part still attributes Pods in shared mode and a move
// fails with a clear error instead of the agent refusing to start.
#ifndef FABRIC_AGENT_NETNS_UNAVAILABLE_RDMA_NETLINK_H_
#define FABRIC_AGENT_NETNS_UNAVAILABLE_RDMA_NETLINK_H_

#include <memory>
#include <string>
#include <vector>

#include "agent/netns/rdma_netlink.h"

namespace fabric::netns {

class UnavailableRdmaNetlink : public RdmaNetlink {
 public:
  explicit UnavailableRdmaNetlink(std::string why) : why_(std::move(why)) {}
  absl::StatusOr<NetnsMode> GetNetnsMode() override;
  absl::StatusOr<std::vector<RdmaLink>> ListDevices(const std::string& netns_path) override;
  absl::Status MoveDevice(const std::string& device, const std::string& from_netns,
                          const std::string& to_netns) override;

 private:
  std::string why_;
};

// The real RDMA netlink (libmnl) if it opens, else the stand-in above with
// the reason (logged once).
std::unique_ptr<RdmaNetlink> OpenRdmaNetlink();

}  // namespace fabric::netns

#endif  // FABRIC_AGENT_NETNS_UNAVAILABLE_RDMA_NETLINK_H_
