// FakeDevicePreparer: a dra::DevicePreparer for tests with injectable
// failures that records every call.
#ifndef FABRIC_TEST_FAKES_FAKE_DEVICE_PREPARER_H_
#define FABRIC_TEST_FAKES_FAKE_DEVICE_PREPARER_H_

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "plugin/dra/device_preparer.h"

namespace fabric::dra {

// A DevicePreparer for tests: "fabric.gpustack.ai/device=<claim uid>-<device>"
// per device; injectable failures; records every call.
class FakeDevicePreparer final : public DevicePreparer {
 public:
  absl::StatusOr<std::vector<std::vector<std::string>>> Prepare(
      const std::string& claim_uid, const std::vector<std::string>& device_names) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++prepare_calls_;
    prepare_log_.push_back(claim_uid);
    if (fail_devices_.count(claim_uid)) return fail_devices_[claim_uid];
    std::vector<std::vector<std::string>> ids;
    for (const std::string& d : device_names) {
      if (unknown_devices_.count(d)) {
        return absl::NotFoundError(absl::StrCat("device ", d, " is not published on this node"));
      }
      ids.push_back({absl::StrCat("fabric.gpustack.ai/device=", claim_uid, "-", d)});
    }
    prepared_[claim_uid] = device_names;
    return ids;
  }
  absl::Status Unprepare(const std::string& claim_uid) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++unprepare_calls_;
    if (fail_unprepare_.count(claim_uid)) return fail_unprepare_[claim_uid];
    prepared_.erase(claim_uid);
    return absl::OkStatus();
  }

  // An OK status clears an earlier failure.
  void FailPrepare(const std::string& claim_uid, absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ok()) {
      fail_devices_.erase(claim_uid);
    } else {
      fail_devices_[claim_uid] = std::move(s);
    }
  }
  void FailUnprepare(const std::string& claim_uid, absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (s.ok()) {
      fail_unprepare_.erase(claim_uid);
    } else {
      fail_unprepare_[claim_uid] = std::move(s);
    }
  }
  void MarkUnknown(const std::string& device) {
    std::lock_guard<std::mutex> lock(mu_);
    unknown_devices_.insert(device);
  }
  int prepare_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return prepare_calls_;
  }
  int unprepare_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return unprepare_calls_;
  }
  bool IsPrepared(const std::string& claim_uid) const {
    std::lock_guard<std::mutex> lock(mu_);
    return prepared_.count(claim_uid) > 0;
  }

 private:
  mutable std::mutex mu_;
  int prepare_calls_ = 0;
  int unprepare_calls_ = 0;
  std::vector<std::string> prepare_log_;
  std::map<std::string, std::vector<std::string>> prepared_;
  std::map<std::string, absl::Status> fail_devices_;
  std::map<std::string, absl::Status> fail_unprepare_;
  std::set<std::string> unknown_devices_;
};

}  // namespace fabric::dra

#endif  // FABRIC_TEST_FAKES_FAKE_DEVICE_PREPARER_H_
