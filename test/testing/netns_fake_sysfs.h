// NetnsFakeSysfs: an RDMA netlink fake wired to a FakeSysfs, so that a device
// moved into a Pod netns in exclusive mode vanishes from the fake host sysfs
// exactly as the kernel makes it vanish (class/infiniband is netns-tagged),
// and comes back when it is moved back or its netns is destroyed.
#ifndef FABRIC_TEST_TESTING_NETNS_FAKE_SYSFS_H_
#define FABRIC_TEST_TESTING_NETNS_FAKE_SYSFS_H_

#include <string>
#include <vector>

#include "test/fakes/fake_rdma_netlink.h"
#include "test/testing/fake_sysfs.h"

namespace fabric::testing {

class NetnsFakeSysfs : public netns::RdmaNetlink {
 public:
  // Every device already in `fs` is registered in the host netns; the mode is
  // exclusive. `fs` is borrowed.
  explicit NetnsFakeSysfs(FakeSysfs* fs, const std::vector<std::string>& devices);

  netns::FakeRdmaNetlink& netlink() { return fake_; }
  // The kernel's netns teardown: devices in `netns` return to the host view.
  void DestroyNetns(const std::string& netns);

  absl::StatusOr<netns::NetnsMode> GetNetnsMode() override { return fake_.GetNetnsMode(); }
  absl::StatusOr<std::vector<netns::RdmaLink>> ListDevices(const std::string& netns_path) override {
    return fake_.ListDevices(netns_path);
  }
  absl::Status MoveDevice(const std::string& device, const std::string& from_netns,
                          const std::string& to_netns) override;

 private:
  void Sync(const std::string& device);

  FakeSysfs* fs_;
  netns::FakeRdmaNetlink fake_;
  std::vector<std::string> devices_;
  std::vector<std::string> hidden_;
};

}  // namespace fabric::testing

#endif  // FABRIC_TEST_TESTING_NETNS_FAKE_SYSFS_H_
