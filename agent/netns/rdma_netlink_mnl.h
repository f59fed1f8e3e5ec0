// MnlRdmaNetlink: RdmaNetlink over a NETLINK_RDMA socket (libmnl), the same
// messages iproute2's `rdma` and rdma-cni send:
//  - mode:  RDMA_NLDEV_CMD_SYS_GET, attr RDMA_NLDEV_SYS_ATTR_NETNS_MODE (u8, 0 = exclusive)
//  - list:  RDMA_NLDEV_CMD_GET dump, attrs RDMA_NLDEV_ATTR_DEV_INDEX / _DEV_NAME
//  - move:  RDMA_NLDEV_CMD_SET with RDMA_NLDEV_ATTR_DEV_INDEX + RDMA_NLDEV_NET_NS_FD
// Operating "from" another netns opens the socket inside it (a short-lived
// thread setns()es there; a socket keeps the netns it was created in).
// Needs CAP_NET_ADMIN (and CAP_SYS_ADMIN to setns).
#ifndef FABRIC_AGENT_NETNS_RDMA_NETLINK_MNL_H_
#define FABRIC_AGENT_NETNS_RDMA_NETLINK_MNL_H_

#include <memory>

#include "agent/netns/rdma_netlink.h"

namespace fabric::netns {

class MnlRdmaNetlink : public RdmaNetlink {
 public:
  // Captures the caller's netns (via SIOCGSKNS, no /proc needed) as "host".
  static absl::StatusOr<std::unique_ptr<MnlRdmaNetlink>> Create();
  ~MnlRdmaNetlink() override;

  absl::StatusOr<NetnsMode> GetNetnsMode() override;
  absl::StatusOr<std::vector<RdmaLink>> ListDevices(const std::string& netns_path) override;
  absl::Status MoveDevice(const std::string& device, const std::string& from_netns,
                          const std::string& to_netns) override;

 private:
  explicit MnlRdmaNetlink(int host_netns_fd) : host_netns_fd_(host_netns_fd) {}
  int host_netns_fd_;
};

}  // namespace fabric::netns

#endif  // FABRIC_AGENT_NETNS_RDMA_NETLINK_MNL_H_
