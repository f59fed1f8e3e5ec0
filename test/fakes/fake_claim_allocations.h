// FakeClaimAllocations: a dra::ClaimAllocations for tests that answers what
// Set/SetError stored and counts calls.
#ifndef FABRIC_TEST_FAKES_FAKE_CLAIM_ALLOCATIONS_H_
#define FABRIC_TEST_FAKES_FAKE_CLAIM_ALLOCATIONS_H_

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "plugin/dra/claim_allocation.h"

namespace fabric::dra {

// A ClaimAllocations for tests: answers what Set/SetError stored, counts calls.
class FakeClaimAllocations final : public ClaimAllocations {
 public:
  void Set(ClaimAllocation allocation) {
    std::lock_guard<std::mutex> lock(mu_);
    auto key = std::make_tuple(allocation.claim_namespace, allocation.name);
    answers_[key] = std::move(allocation);
    errors_.erase(key);
  }
  void SetError(const std::string& claim_namespace, const std::string& name, absl::Status error) {
    std::lock_guard<std::mutex> lock(mu_);
    errors_[std::make_tuple(claim_namespace, name)] = std::move(error);
  }
  absl::StatusOr<ClaimAllocation> Get(const std::string& claim_namespace, const std::string& name,
                                      const std::string& uid) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++calls_;
    auto key = std::make_tuple(claim_namespace, name);
    if (auto e = errors_.find(key); e != errors_.end()) return e->second;
    auto it = answers_.find(key);
    if (it == answers_.end()) {
      return absl::NotFoundError("resourceclaims \"" + name + "\" not found");
    }
    if (it->second.uid != uid) {
      return absl::FailedPreconditionError("ResourceClaim " + claim_namespace + "/" + name +
                                           " has UID " + it->second.uid + ", not " + uid);
    }
    return it->second;
  }
  int calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string>, ClaimAllocation> answers_;
  std::map<std::tuple<std::string, std::string>, absl::Status> errors_;
  int calls_ = 0;
};

}  // namespace fabric::dra

#endif  // FABRIC_TEST_FAKES_FAKE_CLAIM_ALLOCATIONS_H_
