#include "agent/dra_front/slice_publisher.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"

namespace fabric::dra {

class SlicePublisher::SliceEvents : public kubeapi::WatchHandler {
 public:
  explicit SliceEvents(SlicePublisher* publisher) : publisher_(publisher) {}
  void OnList(const kubeapi::ObjectList&) override { publisher_->OnSlicesChanged(); }
  void OnEvent(const kubeapi::WatchEvent&) override { publisher_->OnSlicesChanged(); }
  void OnError(const absl::Status& error, absl::Duration retry_in) override {
    LogWarn(Component::kDra, "ResourceSlice watch: {} (retry in {})", error.message(),
            absl::FormatDuration(retry_in));
  }

 private:
  SlicePublisher* const publisher_;
};

SlicePublisher::SlicePublisher(SlicePublisherOptions options, kubeapi::KubeClient* client,
                               Pools pools)
    : options_(std::move(options)), client_(client), pools_(std::move(pools)) {}

std::string SlicePublisher::FieldSelector() const {
  return absl::StrCat("spec.nodeName=", options_.node_name, ",spec.driver=", options_.driver);
}

SlicePublisher::~SlicePublisher() { Stop(); }

absl::Status SlicePublisher::SyncNow() {
  std::lock_guard<std::mutex> sync_lock(sync_mu_);
  kubeapi::ListOptions lo;
  lo.field_selector = FieldSelector();
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
  if (options_.watch_slices && client_ != nullptr) {
    kubeapi::WatchOptions wo;
    wo.collection_path = kResourceSlicesPath;
    wo.field_selector = FieldSelector();
    wo.initial_backoff = options_.watch_initial_backoff;
    events_ = std::make_unique<SliceEvents>(this);
    watch_ = std::make_unique<kubeapi::Watch>(client_, wo, events_.get());
    watch_thread_ = std::thread([this] { (void)watch_->Run(); });
  }
}

void SlicePublisher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (watch_) watch_->Stop();
  if (watch_thread_.joinable()) watch_thread_.join();
  if (thread_.joinable()) thread_.join();
}

void SlicePublisher::OnSlicesChanged() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slices_changed_ = true;
  }
  cv_.notify_all();
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
  using Clock = std::chrono::steady_clock;
  absl::Duration backoff = options_.initial_backoff;
  Clock::time_point next_sync = Clock::now();  // the first sync: at once
  // Repairs are syncs that put back what someone else changed. The first
  // goes at once (the kubelet's wipe); a deleter that keeps going (the
  // garbage collector, a second writer) is answered ever more slowly.
  absl::Duration repair_delay = absl::ZeroDuration();
  std::optional<Clock::time_point> last_repair;
  Clock::time_point repair_not_before = Clock::now();
  for (;;) {
    bool only_slices_changed = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (stop_) return;
        const Clock::time_point now = Clock::now();
        if (poked_ || now >= next_sync || (slices_changed_ && now >= repair_not_before)) break;
        cv_.wait_until(lock, slices_changed_ ? std::min(next_sync, repair_not_before) : next_sync);
      }
      only_slices_changed = slices_changed_ && !poked_ && Clock::now() < next_sync;
      poked_ = false;
      slices_changed_ = false;
    }
    if (options_.ready && !options_.ready()) {
      next_sync = Clock::now() + std::chrono::milliseconds(200);
      continue;
    }
    // Our own writes come back through the watch too: those syncs find
    // nothing to do and cost one List.
    if (options_.before_sync && !only_slices_changed) options_.before_sync();
    const uint64_t writes_before = status().writes;
    absl::Status s = SyncNow();
    const Clock::time_point now = Clock::now();
    if (only_slices_changed && s.ok() && status().writes > writes_before) {
      repair_delay =
          last_repair && now - *last_repair < absl::ToChronoNanoseconds(options_.repair_quiet)
              ? std::clamp(repair_delay * 2, options_.initial_backoff, options_.max_backoff)
              : absl::ZeroDuration();
      last_repair = now;
      repair_not_before = now + absl::ToChronoNanoseconds(repair_delay);
      if (repair_delay > absl::ZeroDuration()) {
        LogWarn(Component::kDra,
                "ResourceSlices changed by someone else again: published again; the next repair "
                "waits {}",
                absl::FormatDuration(repair_delay));
      }
    }
    if (s.ok()) {
      backoff = options_.initial_backoff;
      next_sync = now + absl::ToChronoNanoseconds(options_.resync);
    } else {
      LogWarn(Component::kDra, "ResourceSlices not synced (retry in {}): {}",
              absl::FormatDuration(backoff), s.message());
      next_sync = now + absl::ToChronoNanoseconds(backoff);
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
  }
}

}  // namespace fabric::dra
