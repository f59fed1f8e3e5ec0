#include "agent/pools/pool_state.h"

namespace fabric {

bool SameAdvertisement(const PoolSnapshot& a, const PoolSnapshot& b) {
  if (a.units.size() != b.units.size()) return false;
  for (size_t i = 0; i < a.units.size(); ++i) {
    const PoolUnit& x = a.units[i];
    const PoolUnit& y = b.units[i];
    if (x.id != y.id || x.healthy != y.healthy || x.numa_node != y.numa_node) return false;
  }
  return true;
}

PoolState::PoolState(std::shared_ptr<const PoolSnapshot> initial)
    : resource_(initial->resource), snapshot_(std::move(initial)) {}

std::shared_ptr<const PoolSnapshot> PoolState::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return snapshot_;
}

bool PoolState::Update(std::shared_ptr<const PoolSnapshot> next) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool changed = !SameAdvertisement(*snapshot_, *next);
  snapshot_ = std::move(next);
  if (!changed) return false;
  for (PoolSubscriber* s : subscribers_) s->Push(snapshot_);
  return true;
}

void PoolState::Subscribe(PoolSubscriber* s) {
  std::lock_guard<std::mutex> lock(mu_);
  subscribers_.insert(s);
  s->Push(snapshot_);
}

void PoolState::Unsubscribe(PoolSubscriber* s) {
  std::lock_guard<std::mutex> lock(mu_);
  subscribers_.erase(s);
}

void PoolState::CloseStreams() {
  std::lock_guard<std::mutex> lock(mu_);
  for (PoolSubscriber* s : subscribers_) s->Close();
}

size_t PoolState::open_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return subscribers_.size();
}

void PoolState::SetClaimer(Claimer claimer) {
  std::lock_guard<std::mutex> lock(mu_);
  claimer_ = std::move(claimer);
}

absl::Status PoolState::Claim(const std::vector<std::string>& ids) const {
  Claimer claimer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    claimer = claimer_;
  }
  return claimer ? claimer(resource_, ids) : absl::OkStatus();
}

}  // namespace fabric
