#include "agent/metrics/http_server.h"

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"

namespace fabric {

HttpServer::HttpServer(HttpHandlers handlers, absl::Duration metrics_cache)
    : handlers_(std::move(handlers)), cache_(metrics_cache) {}

HttpServer::~HttpServer() { Stop(); }

std::string HttpServer::Metrics() {
  std::lock_guard<std::mutex> lock(render_mu_);
  const absl::Time now = absl::Now();
  if (cache_ > absl::ZeroDuration() && now - cached_at_ < cache_) return cached_;
  cached_ = handlers_.metrics();
  cached_at_ = now;
  return cached_;
}

absl::Status HttpServer::Start(const std::string& address) {
  size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-address: '", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";

  server_ = std::make_unique<httplib::Server>();
  server_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);
  server_->set_keep_alive_max_count(10);
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server_->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    std::string why = handlers_.not_ready_reason();
    if (why.empty()) {
      res.set_content("ready\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content(why + "\n", "text/plain");
    }
  });
  server_->Get("/v1/node", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(handlers_.node_json(), "application/json");
  });
  if (handlers_.peers_json) {
    server_->Get("/v1/peers", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(handlers_.peers_json(), "application/json");
    });
  }
  if (port == 0) {
    port_ = server_->bind_to_any_port(host.c_str());
    if (port_ < 0) return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  } else {
    if (!server_->bind_to_port(host.c_str(), port)) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
    }
    port_ = port;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  LogInfo(Component::kMetrics, "serving /metrics /healthz /readyz /v1/node on {}:{}", host, port_);
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace fabric
