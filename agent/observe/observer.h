// TransportObserver: the sampler's consumer that keeps the transport verdicts
// (transport.h) for /v1/pods, /metrics and fabricctl observe.
//
// After every sampler round, OnSample evaluates the default window (60 s) for
// all Pods of interest and caches it: /metrics and /v1/pods without ?window
// read that cache and cost no evaluation. Other windows are evaluated on
// demand from the latest ring given. Per Pod and container it remembers the
// last efa|rdma|tcp verdict of the periodic evaluation and when (the window's
// end), so an idle container still says what it last did. Thread-safe: one
// mutex, never held while a window is evaluated.
#ifndef FABRIC_AGENT_OBSERVE_OBSERVER_H_
#define FABRIC_AGENT_OBSERVE_OBSERVER_H_

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/http/response.h"
#include "agent/observe/transport.h"
#include "agent/sampler/sample.h"
#include "agent/sampler/sample_ring.h"

namespace fabric::observe {

// How the observer reads the sampler's ring for windows other than the
// default: runs `read` with it, under whatever lock guards it
// (Sampler::ReadRing).
using RingReader = std::function<void(absl::FunctionRef<void(const sampler::SampleRing&)>)>;

struct ObserverOptions {
  TransportOptions transport;
  absl::Duration default_window = kDefaultWindow;
  // Evaluations of other windows (and of Pods asked for by name) between two
  // samples: each is cached until the next sample, and past this many a
  // request for yet another one is refused (429), so a client looping over
  // windows cannot hold up the /metrics render that shares the worker.
  int max_evaluations_per_sample = 4;
  absl::Duration sample_period = absl::Seconds(5);  // when a refused client may retry
};

class TransportObserver {
 public:
  // `ring` reads the sampler's ring for on-demand windows; without one only
  // the default window is served.
  explicit TransportObserver(ObserverOptions options = {}, RingReader ring = nullptr);

  // The sampler's hook, called after each round with its ring.
  void OnSample(const sampler::SampleRing& ring);

  // The PodTransportList document (every Pod). `window` as ParseWindow reads
  // it; empty: the default window (cached). Unavailable before the first
  // sample; InvalidArgument naming a bad window; ResourceExhausted when the
  // window is not cached and this sample's evaluations are spent.
  absl::StatusOr<std::string> PodsJson(absl::string_view window = "") const;
  // One Pod's PodTransport document; NotFound when no Pod of interest has
  // that namespace and name.
  absl::StatusOr<std::string> PodJson(const std::string& ns, const std::string& pod,
                                      absl::string_view window = "") const;

  // fabric_pod_transport{namespace,pod,container,observed} and
  // fabric_pod_transport_fallback{namespace,pod,container} of the default
  // window, as Prometheus text (appended to /metrics by the wiring).
  std::string MetricsText() const;

  // HttpHandlers::pods: GET /v1/pods and /v1/pods/{namespace}/{pod} with an
  // optional query "window=60s". 200 with the document; 400 naming a bad
  // window; 404 for an unknown Pod or path; 429 when the evaluations of this
  // sample period are spent (retry_after_seconds says when to come back); 503
  // before the first sample. Error bodies are {"error": "..."}. Never throws
  // on its inputs.
  HttpAnswer ServeHttp(const std::string& path, const std::string& query) const;

  // The cached default-window result (nullopt before the first sample).
  std::optional<WindowResult> Current() const;
  // The same, shared rather than copied (null before the first sample).
  std::shared_ptr<const WindowResult> CurrentResult() const;

 private:
  using ContainerKey = std::tuple<std::string, std::string, std::string>;  // uid, ns/pod, name
  struct LastNonIdle {
    Verdict verdict;
    absl::Time at;
  };

  // The result for `window` (empty: the cache), with last_non_idle filled.
  absl::StatusOr<std::shared_ptr<const WindowResult>> Result(absl::string_view window) const;
  // `length` evaluated with `transport`, from this sample's cache or within
  // its budget; `key` names the evaluation in the cache.
  absl::StatusOr<std::shared_ptr<const WindowResult>> Evaluated(absl::Duration length,
                                                                const TransportOptions& transport,
                                                                const std::string& key) const;
  void FillLastNonIdle(WindowResult& r) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static ContainerKey KeyOf(const PodObservation& p, const ContainerObservation& c);

  const ObserverOptions options_;
  const RingReader ring_;
  mutable std::mutex mu_;
  std::shared_ptr<const WindowResult> current_ ABSL_GUARDED_BY(mu_);
  // The PodTransportList of current_ and of evaluated_'s results, rendered
  // when first asked; cleared with them by OnSample.
  mutable std::map<const WindowResult*, std::shared_ptr<const std::string>> rendered_
      ABSL_GUARDED_BY(mu_);
  std::map<ContainerKey, LastNonIdle> last_non_idle_ ABSL_GUARDED_BY(mu_);
  // Evaluations asked since the last sample (reset by OnSample).
  mutable std::map<std::string, std::shared_ptr<const WindowResult>> evaluated_
      ABSL_GUARDED_BY(mu_);
  mutable int evaluations_this_sample_ ABSL_GUARDED_BY(mu_) = 0;
  mutable uint64_t evaluations_total_ ABSL_GUARDED_BY(mu_) = 0;
  mutable uint64_t refused_total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace fabric::observe

#endif  // FABRIC_AGENT_OBSERVE_OBSERVER_H_
