// The agent's HTTP endpoint: /metrics, /healthz, /readyz, /v1/node.
//
// A small HTTP/1.1 server (one request per connection, "Connection: close")
// built so that no client can starve the liveness probe:
//  - one event-loop thread (poll) owns every socket; all I/O is non-blocking,
//    so a client that sends or reads slowly occupies a slot, never a thread;
//  - /healthz (and a /metrics answer from the cache) is answered on the loop
//    itself, at once;
//  - /metrics renders, /readyz and /v1/node run on one worker thread, off the
//    loop; queued /metrics requests share one render, and a render is reused
//    for metrics_cache, so a render's cost does not grow with the scrapers;
//  - connections are capped; at the cap the oldest connection that has not
//    finished sending its request is dropped for the new one (then the oldest
//    of any kind), so a probe always gets in;
//  - a request head must arrive within read_timeout of the connect, and a
//    response must be taken within write_timeout, or the connection is closed.
#ifndef FABRIC_AGENT_METRICS_HTTP_SERVER_H_
#define FABRIC_AGENT_METRICS_HTTP_SERVER_H_

#include <atomic>
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

struct HttpHandlers {
  std::function<std::string()> metrics;  // Prometheus text
  // Empty string when ready; otherwise why not (503 body).
  std::function<std::string()> not_ready_reason;
  std::function<std::string()> node_json;
  // The fabric doctor's /v1/peers; unset: no such route (the doctor is off).
  std::function<std::string()> peers_json;
};

struct HttpServerOptions {
  int max_connections = 64;
  absl::Duration read_timeout = absl::Seconds(5);    // connect -> full request head
  absl::Duration write_timeout = absl::Seconds(10);  // response start -> fully sent
  absl::Duration queue_timeout = absl::Seconds(30);  // waiting for the worker
  size_t max_queued = 32;                            // worker jobs; beyond: 503
};

class HttpServer {
 public:
  HttpServer(HttpHandlers handlers, absl::Duration metrics_cache, HttpServerOptions options = {});
  ~HttpServer();

  // address "host:port"; port 0 picks a free port (see port()).
  absl::Status Start(const std::string& address);
  void Stop();
  int port() const { return port_; }

  // Renders done so far (tests).
  uint64_t renders() const { return renders_.load(); }
  // Bytes of the /metrics body held for the cache (0 once it went stale).
  size_t cached_metrics_bytes();

 private:
  struct Conn;
  struct Job {
    uint64_t conn_id;
    std::string path;
    bool head = false;
  };
  struct Done {
    uint64_t conn_id;
    int status;
    std::string content_type;
    std::shared_ptr<const std::string> body;
  };

  void Loop();
  void Work();
  // The cached /metrics body if fresh enough, else nullptr.
  std::shared_ptr<const std::string> FreshMetrics();
  void Wake();

  const HttpHandlers handlers_;
  const absl::Duration cache_;
  const HttpServerOptions options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: stop, or a worker result is ready
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> renders_{0};
  std::thread loop_;
  std::thread worker_;

  std::mutex mu_;  // jobs_, done_, the metrics cache
  std::condition_variable jobs_cv_;
  std::deque<Job> jobs_;
  std::vector<Done> done_;
  std::shared_ptr<const std::string> cached_;
  absl::Time cached_at_ = absl::InfinitePast();
};

}  // namespace fabric

#endif  // FABRIC_AGENT_METRICS_HTTP_SERVER_H_
