#include "test/fakes/fake_rdma_netlink.h"

#include "absl/strings/str_cat.h"

namespace fabric::netns {

void FakeRdmaNetlink::SetMode(NetnsMode mode) {
  std::lock_guard<std::mutex> lock(mu_);
  mode_ = mode;
}

void FakeRdmaNetlink::AddDevice(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  location_[name] = "";
  index_.emplace(name, static_cast<uint32_t>(index_.size() + 1));
}

void FakeRdmaNetlink::RefuseMoves(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  refuse_.insert(name);
}

void FakeRdmaNetlink::DestroyNetns(const std::string& netns) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [dev, where] : location_) {
    if (where == netns) where = "";
  }
}

void FakeRdmaNetlink::FailAll(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_all_ = std::move(status);
}

std::string FakeRdmaNetlink::Location(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = location_.find(name);
  return it == location_.end() ? "?" : it->second;
}

std::vector<FakeRdmaNetlink::Move> FakeRdmaNetlink::moves() const {
  std::lock_guard<std::mutex> lock(mu_);
  return moves_;
}

absl::StatusOr<NetnsMode> FakeRdmaNetlink::GetNetnsMode() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fail_all_.ok()) return fail_all_;
  return mode_;
}

absl::StatusOr<std::vector<RdmaLink>> FakeRdmaNetlink::ListDevices(const std::string& netns_path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fail_all_.ok()) return fail_all_;
  std::vector<RdmaLink> out;
  for (const auto& [dev, where] : location_) {
    // Shared mode: every device is visible in every netns.
    if (mode_ == NetnsMode::kShared || where == netns_path) out.push_back({index_[dev], dev});
  }
  return out;
}

absl::Status FakeRdmaNetlink::MoveDevice(const std::string& device, const std::string& from_netns,
                                         const std::string& to_netns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fail_all_.ok()) return fail_all_;
  std::string what = absl::StrCat("move RDMA device ", device, " from netns ",
                                  from_netns.empty() ? "host" : from_netns, " to netns ",
                                  to_netns.empty() ? "host" : to_netns);
  auto it = location_.find(device);
  if (it == location_.end() || (mode_ == NetnsMode::kExclusive && it->second != from_netns)) {
    return absl::NotFoundError(absl::StrCat(what, ": device not in source netns"));
  }
  if (mode_ == NetnsMode::kShared || refuse_.count(device)) {
    return absl::UnimplementedError(absl::StrCat(what, ": Operation not supported"));
  }
  it->second = to_netns;
  moves_.push_back({device, from_netns, to_netns});
  return absl::OkStatus();
}

}  // namespace fabric::netns
