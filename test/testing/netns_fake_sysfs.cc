#include "test/testing/netns_fake_sysfs.h"

#include <algorithm>

namespace fabric::testing {

NetnsFakeSysfs::NetnsFakeSysfs(FakeSysfs* fs, const std::vector<std::string>& devices)
    : fs_(fs), devices_(devices) {
  fake_.SetMode(netns::NetnsMode::kExclusive);
  for (const auto& d : devices_) fake_.AddDevice(d);
}

void NetnsFakeSysfs::Sync(const std::string& device) {
  const bool in_host = fake_.Location(device).empty();
  auto it = std::find(hidden_.begin(), hidden_.end(), device);
  const bool hidden = it != hidden_.end();
  if (!in_host && !hidden) {
    fs_->MoveOutOfHostNetns(device);
    hidden_.push_back(device);
  } else if (in_host && hidden) {
    fs_->ReturnToHostNetns(device);
    hidden_.erase(it);
  }
}

absl::Status NetnsFakeSysfs::MoveDevice(const std::string& device, const std::string& from_netns,
                                        const std::string& to_netns) {
  absl::Status s = fake_.MoveDevice(device, from_netns, to_netns);
  if (s.ok()) Sync(device);
  return s;
}

void NetnsFakeSysfs::DestroyNetns(const std::string& netns) {
  fake_.DestroyNetns(netns);
  for (const auto& d : devices_) Sync(d);
}

}  // namespace fabric::testing
