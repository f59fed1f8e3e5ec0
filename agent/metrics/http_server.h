// The agent's HTTP endpoint: /metrics, /healthz, /readyz, /v1/node. Runs on
// its own small thread pool with read/write timeouts, and renders /metrics at
// most once per cache period however many clients scrape, so a hostile scrape
// cannot starve the device-plugin servers.
#ifndef FABRIC_AGENT_METRICS_HTTP_SERVER_H_
#define FABRIC_AGENT_METRICS_HTTP_SERVER_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace httplib {
class Server;
}

namespace fabric {

struct HttpHandlers {
  std::function<std::string()> metrics;  // Prometheus text
  // Empty string when ready; otherwise why not (503 body).
  std::function<std::string()> not_ready_reason;
  std::function<std::string()> node_json;
  // The fabric doctor's /v1/peers; unset: no such route (the doctor is off).
  std::function<std::string()> peers_json;
};

class HttpServer {
 public:
  HttpServer(HttpHandlers handlers, absl::Duration metrics_cache);
  ~HttpServer();

  // address "host:port"; port 0 picks a free port (see port()).
  absl::Status Start(const std::string& address);
  void Stop();
  int port() const { return port_; }

 private:
  std::string Metrics();

  HttpHandlers handlers_;
  const absl::Duration cache_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex render_mu_;  // single-flight rendering
  std::string cached_ ABSL_GUARDED_BY(render_mu_);
  absl::Time cached_at_ ABSL_GUARDED_BY(render_mu_) = absl::InfinitePast();
};

}  // namespace fabric

#endif  // FABRIC_AGENT_METRICS_HTTP_SERVER_H_
