#include "agent/dra_front/slice_publisher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"

namespace fabric::dra {

SlicePublisher::SlicePublisher(SlicePublisherOptions options, kubeapi::KubeClient* client,
                               Pools pools)
    : options_(std::move(options)), client_(client), pools_(std::move(pools)) {}

SlicePublisher::~SlicePublisher() { Stop(); }

absl::Status SlicePublisher::SyncNow() {
  std::lock_guard<std::mutex> sync_lock(sync_mu_);
  kubeapi::ListOptions lo;
  lo.field_selector =
      absl::StrCat("spec.nodeName=", options_.node_name, ",spec.driver=", options_.driver);
  absl::Status result;
  uint64_t writes = 0;
  ResourceSliceSet set;
  absl::StatusOr<kubeapi::ObjectList> listed = client_->List(kResourceSlicesPath, lo);
  if (!listed.ok()) {
    result = listed.status();
  } else {
    SliceInput in;
    in.node_name = options_.node_name;
    in.driver_name = options_.driver;
    in.pools = pools_();
    in.published = listed->items;
    in.options = options_.slices;
    set = BuildResourceSlices(in);
    for (const std::string& w : set.warnings) LogWarn(Component::kDra, "{}", w);
    const SliceDiff diff =
        DiffSlices(set.slices, listed->items, options_.driver, options_.node_name);
    // Creates and updates first: a slice goes away only once the new
    // generation is complete without it.
    for (const nlohmann::json& s : diff.create) {
      if (!result.ok()) break;
      ++writes;
      if (auto r = client_->Create(kResourceSlicesPath, s); !r.ok()) result = r.status();
    }
    for (const nlohmann::json& s : diff.update) {
      if (!result.ok()) break;
      ++writes;
      const std::string path =
          absl::StrCat(kResourceSlicesPath, "/", s["metadata"]["name"].get<std::string>());
      if (auto r = client_->Update(path, s); !r.ok()) result = r.status();
    }
    for (const std::string& name : diff.remove) {
      if (!result.ok()) break;
      ++writes;
      absl::Status d = client_->Delete(absl::StrCat(kResourceSlicesPath, "/", name), {});
      if (!d.ok() && !absl::IsNotFound(d)) result = d;
    }
    if (result.ok() && !diff.empty()) {
      LogInfo(Component::kDra,
              "ResourceSlices of pool {}: generation {}, {} slice(s), {} device(s) ({} created, "
              "{} updated, {} deleted)",
              options_.node_name, set.generation, set.slices.size(), set.device_count,
              diff.create.size(), diff.update.size(), diff.remove.size());
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  status_.writes += writes;
  status_.synced = result.ok();
  if (result.ok()) {
    ++status_.syncs;
    status_.slices = set.slices.size();
    status_.devices = set.device_count;
    status_.generation = set.generation;
    status_.last_error.clear();
  } else {
    ++status_.failures;
    status_.last_error = std::string(result.message());
  }
  return result;
}

void SlicePublisher::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void SlicePublisher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SlicePublisher::Poke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    poked_ = true;
  }
  cv_.notify_all();
}

SlicePublisherStatus SlicePublisher::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

void SlicePublisher::Run() {
  absl::Duration backoff = options_.initial_backoff;
  absl::Duration wait = absl::ZeroDuration();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, absl::ToChronoNanoseconds(wait), [this] { return stop_ || poked_; });
      if (stop_) return;
      poked_ = false;
    }
    if (options_.before_sync) options_.before_sync();
    absl::Status s = SyncNow();
    if (s.ok()) {
      backoff = options_.initial_backoff;
      wait = options_.resync;
    } else {
      LogWarn(Component::kDra, "ResourceSlices not synced (retry in {}): {}",
              absl::FormatDuration(backoff), s.message());
      wait = backoff;
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }
}

}  // namespace fabric::dra
