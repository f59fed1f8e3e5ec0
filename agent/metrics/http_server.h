// The agent's HTTP endpoint: /metrics, /healthz, /readyz, /v1/node, /v1/peers,
// /v1/pods.
//
// A small HTTP/1.1 server (one request per connection, "Connection: close")
// built so that no client can starve the probes:
//  - one event-loop thread (poll) owns every socket; all I/O is non-blocking,
//    so a client that sends or reads slowly occupies a slot, never a thread;
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
//  - connections are capped; at the cap the oldest connection that has not
//    finished sending its request is dropped for the new one (then the oldest
//    of any kind), so a probe always gets in;
//  - a request head must arrive within read_timeout of the connect, and a
//    response must be taken within write_timeout, or the connection is closed.
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
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace fabric {

// The answer of a handler that routes by path and query (/v1/pods).
struct HttpAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

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
  int port() const { return port_; }

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
  struct Conn;
  struct Job {
    View view = kMetrics;
    std::string path, query;  // kPods only
  };
  struct Done {
    View view;
    int status;
    std::shared_ptr<const std::string> body;
    std::string key;           // kPods: path '?' query
    std::string content_type;  // kPods: the handler's
  };
  struct Cached {
    std::shared_ptr<const std::string> body;
    Clock::time_point at;
  };

  void Loop();
  void Work();
  // Runs the job's handler: 200 and its body (kPods: the handler's status),
  // or 500 when it throws.
  Done Render(const Job& job);
  // The cached body of `view` if fresh enough, else nullptr.
  std::shared_ptr<const std::string> Fresh(View view);
  void Wake();

  const HttpHandlers handlers_;
  const Clock::duration cache_;
  const HttpServerOptions options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop, or a worker result is ready
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> renders_{0};
  std::atomic<uint64_t> handler_errors_{0};
  std::thread loop_;
  std::thread worker_;

  std::mutex mu_;  // jobs_, done_, cached_
  std::condition_variable jobs_cv_;
  std::deque<Job> jobs_;  // at most one per view (kPods: per path and query)
  std::vector<Done> done_;
  Cached cached_[kViews];
};

}  // namespace fabric

#endif  // FABRIC_AGENT_METRICS_HTTP_SERVER_H_
