// A token bucket like golang.org/x/time/rate (the kubelet's PodResources
// limiter): `qps` tokens per second, at most `burst` stored. The clock is
// injected so tests are deterministic.
#ifndef FABRIC_AGENT_PODRESOURCES_TOKEN_BUCKET_H_
#define FABRIC_AGENT_PODRESOURCES_TOKEN_BUCKET_H_

#include <chrono>
#include <functional>
#include <mutex>

namespace fabric::podresources {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  using NowFn = std::function<Clock::time_point()>;

  TokenBucket(
      double qps, int burst, NowFn now = [] { return Clock::now(); });

  // Takes one token if available.
  bool TryAcquire();
  // Takes one token, sleeping until one is available, unless that would take
  // longer than `max_wait` (then returns false without taking a token).
  bool Acquire(std::chrono::milliseconds max_wait);

 private:
  // Refills and returns how long until one token is available (0 if now).
  Clock::duration RefillLocked(Clock::time_point now);

  const double qps_;
  const double burst_;
  NowFn now_;
  std::mutex mu_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace fabric::podresources

#endif  // FABRIC_AGENT_PODRESOURCES_TOKEN_BUCKET_H_
