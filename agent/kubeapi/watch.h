// A reflector: List, then watch from the list's resourceVersion, handing
// every event to a handler; it keeps going until Stop():
// - each list names a resourceVersion as client-go's reflector does
//   (relistResourceVersion): "0" for the first one, so the API server answers
//   from its watch cache instead of a quorum read of etcd (before 1.31 that
//   read fetches every object of the resource in the cluster and filters by
//   the selectors afterwards); the last version seen for a re-list, so the
//   answer is never older than what the handler already has; "" (the quorum
//   read) only right after the server refused the version (410 Expired, or
//   "Too large resource version"), once, then from the versions seen again;
// - a stream the server ends (timeoutSeconds, a restart) resumes from the
//   last resourceVersion seen (events and bookmarks advance it);
// - 410 Gone (HTTP, or an ERROR event: "too old resource version") re-lists,
//   and the handler gets the whole new state;
// - failures (server down, 5xx, a broken stream) back off exponentially with
//   jitter, capped; a watch that ran long enough resets the backoff.
#ifndef FABRIC_AGENT_KUBEAPI_WATCH_H_
#define FABRIC_AGENT_KUBEAPI_WATCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/kubeapi/kube_client.h"
#include "agent/kubeapi/watch_stream.h"

namespace fabric::kubeapi {

struct WatchOptions {
  std::string collection_path;  // e.g. /apis/resource.k8s.io/v1/resourceslices
  std::string label_selector;
  std::string field_selector;
  absl::Duration initial_backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);
  // Each stream asks the server to end after this to twice this (jittered,
  // as client-go's 5-10 min).
  absl::Duration stream_timeout = absl::Minutes(5);
  // A stream that ended sooner than this with no event counts as a failure
  // (backs off) instead of a normal end (resumes at once).
  absl::Duration min_healthy_stream = absl::Seconds(1);
  size_t max_line_bytes = 16 << 20;
  // Seams for tests: the clock, the sleep between attempts (default: an
  // interruptible wait on the watch's Canceller; return false to stop), and
  // the jitter source, a number in [0, 1).
  std::function<absl::Time()> now;
  std::function<bool(absl::Duration)> sleep;
  std::function<double()> random;
};

class WatchHandler {
 public:
  virtual ~WatchHandler() = default;
  // The complete state after a (re-)list: replace everything known.
  virtual void OnList(const ObjectList& list) = 0;
  // One ADDED, MODIFIED or DELETED event (bookmarks and errors are handled
  // inside the watch).
  virtual void OnEvent(const WatchEvent& event) = 0;
  // Each failure, after which the watch backs off for `retry_in` (for logs
  // and metrics; the default logs a warning).
  virtual void OnError(const absl::Status& error, absl::Duration retry_in);
};

class Watch {
 public:
  Watch(KubeClient* client, WatchOptions options, WatchHandler* handler);

  // Runs until Stop(); returns OK then. Call once.
  absl::Status Run();
  // From any thread: Run() returns soon (a blocked List or stream is
  // interrupted, a backoff sleep cut short).
  void Stop();

  // Counters, readable from any thread.
  uint64_t lists() const { return lists_.load(); }
  uint64_t streams() const { return streams_.load(); }
  uint64_t failures() const { return failures_.load(); }
  std::string resource_version() const;

 private:
  enum class StreamEnd { kResume, kRelist, kStopped };
  bool ListOnce();
  absl::StatusOr<ObjectList> ListAt(const std::string& resource_version);
  StreamEnd StreamOnce();
  bool Backoff(const absl::Status& error);
  absl::Duration NextBackoff();

  KubeClient* const client_;
  WatchOptions options_;
  WatchHandler* const handler_;
  Canceller cancel_;
  mutable std::mutex rv_mu_;
  std::string rv_;
  int consecutive_failures_ = 0;
  std::atomic<uint64_t> lists_{0}, streams_{0}, failures_{0};
};

}  // namespace fabric::kubeapi

#endif  // FABRIC_AGENT_KUBEAPI_WATCH_H_
