// The agent's plain HTTP endpoint: /metrics, /healthz, /readyz, /v1/node,
// /v1/peers, /v1/pods, on the server core (agent/http/server.h: one poll
// loop owns every socket, deadlines from the connect, a capped connection
// table, so no client can starve the probes). What this file adds:
//  - /healthz and /readyz are answered on the loop itself, at once: neither
//    waits behind a render, so a full worker queue cannot fail readiness;
//  - the three views (/metrics, /v1/node, /v1/peers) render on one worker
//    thread, off the loop. Each view is rendered by at most one job at a
//    time: every request for it that arrives meanwhile waits for that render
//    and shares it, and a render is reused for `cache` (the same TTL for all
//    three), so a view's cost does not grow with the clients asking for it;
//  - a handler that throws is answered 500 and counted
//    (fabric_http_handler_errors_total, appended to /metrics); the server
//    serves on;
//  - every duration (cache age, deadlines) is measured on the monotonic clock
//    (std::chrono::steady_clock): an NTP step of the wall clock neither freezes
//    the cache nor expires every connection at once.
#ifndef FABRIC_AGENT_METRICS_HTTP_SERVER_H_
#define FABRIC_AGENT_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/http/response.h"
#include "agent/http/server.h"

namespace fabric {

// A handler may throw: the request is answered 500 and counted.
struct HttpHandlers {
  std::function<std::string()> metrics;  // Prometheus text
  // Empty string when ready; otherwise why not (503 body). Called on the event
  // loop for every /readyz: it must be cheap and must never block (read
  // atomics or values cached by the threads that know them; no I/O, no lock
  // held across I/O).
  std::function<std::string()> not_ready_reason;
  std::function<std::string()> node_json;
  // The fabric doctor's /v1/peers; unset: no such route (the doctor is off).
  std::function<std::string()> peers_json;
  // Observed transport (--observe): GET /v1/pods and /v1/pods/{ns}/{pod},
  // given the path and the query (after '?', "" without one). Rendered on
  // the worker, never cached by the server (the observer keeps its own);
  // concurrent requests for the same path and query share one call. Answered
  // to loopback peers only: any other gets 403 (JSON), since this port has
  // neither TLS nor authentication (agent/podsapi serves it with both).
  // Unset: no such route.
  std::function<HttpAnswer(const std::string& path, const std::string& query)> pods;
};

struct HttpServerOptions {
  int max_connections = 64;
  absl::Duration read_timeout = absl::Seconds(5);    // connect -> full request head
  absl::Duration write_timeout = absl::Seconds(10);  // response start -> fully sent
  absl::Duration queue_timeout = absl::Seconds(30);  // waiting for a render
};

class HttpServer {
 public:
  HttpServer(HttpHandlers handlers, absl::Duration metrics_cache, HttpServerOptions options = {});
  ~HttpServer();

  // address "host:port"; port 0 picks a free port (see port()).
  absl::Status Start(const std::string& address);
  void Stop();
  int port() const { return core_ ? core_->port() : 0; }

  // Renders of the three views done so far (tests).
  uint64_t renders() const { return renders_.load(); }
  // Requests answered 500 because a handler threw.
  uint64_t handler_errors() const { return handler_errors_.load(); }
  // Bytes of the /metrics body held for the cache (0 once it went stale).
  size_t cached_metrics_bytes();

 private:
  using Clock = std::chrono::steady_clock;
  // The views rendered on the worker, each cached and shared; kPods is
  // rendered per path and query, shared by identical requests, not cached.
  enum View { kMetrics, kNode, kPeers, kPods, kViews };
  struct Job {
    View view = kMetrics;
    std::string path, query;  // kPods only
  };
  struct Cached {
    std::shared_ptr<const std::string> body;
    Clock::time_point at;
  };

  // On the core's loop: answers the probes, hands the rest to the worker.
  void Route(uint64_t id, const HttpRequest& request);
  // Answers from the cache, or waits for the view's one render.
  void ServeView(uint64_t id, View view);
  // /v1/pods: one render per path and query, shared by whoever asks meanwhile.
  void ServePods(uint64_t id, const std::string& path, const std::string& query);
  void Work();
  // Runs the job's handler and answers every request waiting for it: 200 and
  // its body (kPods: the handler's status), or 500 when it throws.
  void Render(const Job& job);
  // Drops the cached bodies gone stale; the time of the next one to go.
  Clock::time_point DropStale(std::unique_lock<std::mutex>& lock);

  const HttpHandlers handlers_;
  const Clock::duration cache_;
  const HttpServerOptions options_;
  std::unique_ptr<HttpServerCore> core_;
  std::atomic<uint64_t> renders_{0};
  std::atomic<uint64_t> handler_errors_{0};
  std::thread worker_;

  std::mutex mu_;  // stop_, jobs_, waiters_, cached_
  std::condition_variable jobs_cv_;
  bool stop_ = false;
  std::deque<Job> jobs_;  // at most one per view (kPods: per path and query)
  // The requests waiting for a render, by the view's path, or for /v1/pods by
  // path '?' query: non-empty means a job for it is pending, so no second one.
  std::map<std::string, std::vector<uint64_t>> waiters_;
  Cached cached_[kViews];
};

}  // namespace fabric

#endif  // FABRIC_AGENT_METRICS_HTTP_SERVER_H_
