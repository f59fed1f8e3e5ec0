#include "plugin/dra/dra_health_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/time/clock.h"
#include "agent/base/logging.h"
#include "agent/base/utf8.h"

namespace fabric::dra {
namespace {

// The kubelet truncates longer messages; sending less keeps ours readable.
constexpr size_t kMaxMessage = 1024;
// How often a waiting stream checks whether the kubelet went away.
constexpr auto kCancelPoll = std::chrono::milliseconds(200);

std::string Truncate(const std::string& s) {
  std::string safe = SanitizeUtf8(s);
  if (safe.size() <= kMaxMessage) return safe;
  size_t cut = kMaxMessage - 3;
  while (cut > 0 && (static_cast<unsigned char>(safe[cut]) & 0xC0) == 0x80) --cut;
  return safe.substr(0, cut) + "...";
}

}  // namespace

DraHealthService::DraHealthService(std::string pool, absl::Duration resend_period)
    : pool_(std::move(pool)), resend_period_(resend_period) {}

DraHealthService::~DraHealthService() {
  EndStreams();
  std::unique_lock<std::mutex> lock(mu_);
  streams_closed_.wait(lock,
                       [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return open_streams_ == 0; });
}

void DraHealthService::Publish(std::vector<DeviceHealthEntry> devices) {
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  std::lock_guard<std::mutex> lock(mu_);
  bool changed = devices.size() != devices_.size();
  std::vector<Tracked> next;
  next.reserve(devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    Tracked t{std::move(devices[i]), now};
    for (const Tracked& old : devices_) {
      if (old.entry == t.entry) t.since_unix = old.since_unix;  // unchanged: keep its time
    }
    if (!changed && !(devices_[i].entry == t.entry)) changed = true;
    next.push_back(std::move(t));
  }
  if (!changed) return;
  devices_ = std::move(next);
  ++generation_;
  changed_.notify_all();
}

void DraHealthService::EndStreams() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++epoch_;
  }
  changed_.notify_all();
}

int DraHealthService::open_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_streams_;
}

uint64_t DraHealthService::messages_sent() const {
  return messages_sent_.load(std::memory_order_relaxed);
}

::v1alpha1::NodeWatchResourcesResponse DraHealthService::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return BuildLocked();
}

::v1alpha1::NodeWatchResourcesResponse DraHealthService::BuildLocked() const {
  ::v1alpha1::NodeWatchResourcesResponse out;
  for (const Tracked& t : devices_) {
    auto* d = out.add_devices();
    d->mutable_device()->set_pool_name(SanitizeUtf8(pool_));
    d->mutable_device()->set_device_name(SanitizeUtf8(t.entry.device));
    d->set_health(t.entry.healthy ? ::v1alpha1::HEALTHY : ::v1alpha1::UNHEALTHY);
    d->set_last_updated_time(t.since_unix);
    d->set_message(Truncate(t.entry.message));
  }
  return out;
}

grpc::Status DraHealthService::NodeWatchResources(
    grpc::ServerContext* ctx, const ::v1alpha1::NodeWatchResourcesRequest*,
    grpc::ServerWriter<::v1alpha1::NodeWatchResourcesResponse>* writer) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t epoch = epoch_;
  ++open_streams_;
  LogInfo(Component::kHealth, "DRA: the kubelet watches device health ({} device(s))",
          devices_.size());
  uint64_t sent_generation = generation_;
  ::v1alpha1::NodeWatchResourcesResponse message = BuildLocked();
  auto next_resend = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(resend_period_);
  while (true) {
    // Written without the lock: a slow kubelet must not hold up Publish.
    lock.unlock();
    bool ok = writer->Write(message);
    lock.lock();
    if (!ok) break;  // the kubelet went away
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    while (true) {
      if (epoch_ != epoch || ctx->IsCancelled()) break;
      if (generation_ != sent_generation) break;
      if (std::chrono::steady_clock::now() >= next_resend) break;  // keep-alive
      changed_.wait_for(lock, kCancelPoll);
    }
    if (epoch_ != epoch || ctx->IsCancelled()) break;
    sent_generation = generation_;
    message = BuildLocked();
    next_resend = std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(resend_period_);
  }
  --open_streams_;
  streams_closed_.notify_all();
  return grpc::Status::OK;
}

}  // namespace fabric::dra
