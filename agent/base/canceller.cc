#include "agent/base/canceller.h"

namespace fabric {

void Canceller::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  // Under the lock: the guard's destructor waits for it, so a waker never
  // runs after its transfer has ended.
  if (waker_) waker_();
  cv_.notify_all();
}

bool Canceller::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool Canceller::SleepFor(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, absl::ToChronoNanoseconds(d), [&] { return cancelled_; });
  return !cancelled_;
}

Canceller::WakerGuard::WakerGuard(Canceller* c, std::function<void()> wake) : c_(c) {
  if (c_ == nullptr) return;
  std::lock_guard<std::mutex> lock(c_->mu_);
  c_->waker_ = wake;
  if (c_->cancelled_) wake();
}

Canceller::WakerGuard::~WakerGuard() {
  if (c_ == nullptr) return;
  std::lock_guard<std::mutex> lock(c_->mu_);
  c_->waker_ = nullptr;
}

}  // namespace fabric
