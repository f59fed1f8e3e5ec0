// A ResourceSource for other modules' tests: Dump() returns what the test set
// (a list, or an error), and counts its calls.
#ifndef FABRIC_TEST_FAKES_FAKE_RESOURCE_SOURCE_H_
#define FABRIC_TEST_FAKES_FAKE_RESOURCE_SOURCE_H_

#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "agent/restrack/rdma_resources.h"

namespace fabric::restrack {

class FakeResourceSource : public ResourceSource {
 public:
  FakeResourceSource() = default;
  explicit FakeResourceSource(std::vector<RdmaResource> resources);

  // What the next Dump() calls return; each replaces the other. Thread-safe.
  void Set(std::vector<RdmaResource> resources);
  void SetError(absl::Status error);  // `error` must not be OK
  void SetNotes(DumpNotes notes);

  absl::StatusOr<std::vector<RdmaResource>> Dump() override;
  DumpNotes LastDumpNotes() const override;
  int dump_calls() const;

 private:
  mutable std::mutex mu_;
  std::vector<RdmaResource> resources_;
  absl::Status error_;
  DumpNotes notes_;
  int dump_calls_ = 0;
};

// Shorthands for building lists in tests.
// An RC QP; `state` RTS (connected) unless given (kQpStateReset: a probe).
RdmaResource Qp(const std::string& device, uint32_t lqpn, uint32_t pid, uint32_t port = 1,
                uint8_t state = kQpStateRts);
RdmaResource Cq(const std::string& device, uint32_t cqn, uint32_t pid);
RdmaResource Mr(const std::string& device, uint32_t mrn, uint32_t pid, uint64_t bytes);
RdmaResource Pd(const std::string& device, uint32_t pdn, uint32_t pid);
// A kernel-owned resource ("ib_core", "rdma_cm"). A QP of ib_core is its
// GSI QP; one of another owner a UD QP (IPoIB's kind), both RTS.
RdmaResource KernelOwned(ResourceKind kind, const std::string& device, uint32_t id,
                         const std::string& kern_name);

}  // namespace fabric::restrack

#endif  // FABRIC_TEST_FAKES_FAKE_RESOURCE_SOURCE_H_
