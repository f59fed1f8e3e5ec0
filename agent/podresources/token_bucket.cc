#include "agent/podresources/token_bucket.h"

#include <algorithm>
#include <thread>

namespace fabric::podresources {

TokenBucket::TokenBucket(double qps, int burst, NowFn now)
    : qps_(qps), burst_(std::max(1, burst)), now_(std::move(now)), tokens_(burst_), last_(now_()) {}

TokenBucket::Clock::duration TokenBucket::RefillLocked(Clock::time_point now) {
  if (now > last_) {
    double elapsed = std::chrono::duration<double>(now - last_).count();
    tokens_ = std::min(burst_, tokens_ + elapsed * qps_);
    last_ = now;
  }
  if (tokens_ >= 1.0) return Clock::duration::zero();
  if (qps_ <= 0) return Clock::duration::max();
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>((1.0 - tokens_) / qps_));
}

bool TokenBucket::TryAcquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (RefillLocked(now_()) != Clock::duration::zero()) return false;
  tokens_ -= 1.0;
  return true;
}

bool TokenBucket::Acquire(std::chrono::milliseconds max_wait) {
  auto deadline = now_() + max_wait;
  while (true) {
    Clock::duration wait;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Clock::time_point now = now_();
      wait = RefillLocked(now);
      if (wait == Clock::duration::zero()) {
        tokens_ -= 1.0;
        return true;
      }
      if (wait == Clock::duration::max() || now + wait > deadline) return false;
    }
    std::this_thread::sleep_for(wait);
  }
}

}  // namespace fabric::podresources
