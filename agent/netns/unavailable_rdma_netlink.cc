#include "agent/netns/unavailable_rdma_netlink.h"

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/netns/rdma_netlink_mnl.h"

namespace fabric::netns {

absl::StatusOr<NetnsMode> UnavailableRdmaNetlink::GetNetnsMode() {
  return absl::UnavailableError("RDMA netlink unavailable: " + why_);
}

absl::StatusOr<std::vector<RdmaLink>> UnavailableRdmaNetlink::ListDevices(const std::string&) {
  return absl::UnavailableError("RDMA netlink unavailable: " + why_);
}

absl::Status UnavailableRdmaNetlink::MoveDevice(const std::string& device, const std::string&,
                                                const std::string&) {
  return absl::UnavailableError(
      absl::StrCat("cannot move ", device, ": RDMA netlink unavailable: ", why_));
}

std::unique_ptr<RdmaNetlink> OpenRdmaNetlink() {
  auto nl = MnlRdmaNetlink::Create();
  if (nl.ok()) return std::move(*nl);
  LogWarn(Component::kCni, "RDMA netlink unavailable ({}); exclusive-mode moves will fail",
          nl.status().message());
  return std::make_unique<UnavailableRdmaNetlink>(std::string(nl.status().message()));
}

}  // namespace fabric::netns
