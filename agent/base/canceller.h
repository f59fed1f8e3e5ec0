// A stop request that another thread can raise at any time. A blocking call
// given one (an HTTP exchange, a watch stream, a backoff sleep) returns
// kCancelled soon after Cancel(): a call that waits registers a waker that
// interrupts it.
#ifndef FABRIC_AGENT_BASE_CANCELLER_H_
#define FABRIC_AGENT_BASE_CANCELLER_H_

#include <condition_variable>
#include <functional>
#include <mutex>

#include "absl/time/time.h"

namespace fabric {

class Canceller {
 public:
  void Cancel();
  bool cancelled() const;
  // Sleeps up to `d`; false if cancelled (before or during the sleep).
  bool SleepFor(absl::Duration d);
  // Registers `wake` to be called by Cancel() while the returned guard lives
  // (it runs at once if already cancelled). One waker at a time.
  class WakerGuard {
   public:
    WakerGuard(Canceller* c, std::function<void()> wake);
    ~WakerGuard();
    WakerGuard(const WakerGuard&) = delete;
    WakerGuard& operator=(const WakerGuard&) = delete;

   private:
    Canceller* c_;
  };

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool cancelled_ = false;
  std::function<void()> waker_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_CANCELLER_H_
