#include "agent/dra_front/slice_publisher.h"

#include <algorithm>
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
  absl::Duration backoff = options_.initial_backoff;
  absl::Duration wait = absl::ZeroDuration();
  for (;;) {
    bool only_slices_changed = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, absl::ToChronoNanoseconds(wait),
                   [this] { return stop_ || poked_ || slices_changed_; });
      if (stop_) return;
      only_slices_changed = slices_changed_ && !poked_;
      poked_ = false;
      slices_changed_ = false;
    }
    // Our own writes come back through the watch too: those syncs find
    // nothing to do and cost one List.
    if (options_.before_sync && !only_slices_changed) options_.before_sync();
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
