// FakeRdmaNetlink: an in-memory RDMA subsystem for tests. Netns are plain
// path strings ("" = host); devices can be made to refuse moves the way the
// kernel does (e.g. EOPNOTSUPP for EFA).
#ifndef FABRIC_TEST_FAKES_FAKE_RDMA_NETLINK_H_
#define FABRIC_TEST_FAKES_FAKE_RDMA_NETLINK_H_

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/netns/rdma_netlink.h"

namespace fabric::netns {

class FakeRdmaNetlink : public RdmaNetlink {
 public:
  struct Move {
    std::string device, from, to;
    bool operator==(const Move&) const = default;
  };

  void SetMode(NetnsMode mode);
  // Adds a device in the host netns.
  void AddDevice(const std::string& name);
  // Moves of `name` fail with what the kernel says for a driver lacking
  // netns support (EOPNOTSUPP -> kUnimplemented).
  void RefuseMoves(const std::string& name);
  // The kernel's netns teardown: every device in `netns` returns to host.
  void DestroyNetns(const std::string& netns);
  // Makes every call fail with `status` (ok to clear).
  void FailAll(absl::Status status);

  // Where `name` is ("" = host); "?" if unknown.
  std::string Location(const std::string& name) const;
  std::vector<Move> moves() const;

  absl::StatusOr<NetnsMode> GetNetnsMode() override;
  absl::StatusOr<std::vector<RdmaLink>> ListDevices(const std::string& netns_path) override;
  absl::Status MoveDevice(const std::string& device, const std::string& from_netns,
                          const std::string& to_netns) override;

 private:
  mutable std::mutex mu_;
  NetnsMode mode_ = NetnsMode::kShared;
  std::map<std::string, std::string> location_;  // device -> netns
  std::map<std::string, uint32_t> index_;
  std::set<std::string> refuse_;
  std::vector<Move> moves_;
  absl::Status fail_all_;
};

}  // namespace fabric::netns

#endif  // FABRIC_TEST_FAKES_FAKE_RDMA_NETLINK_H_
