#include "agent/podsapi/tls_server.h"

#include "agent/base/logging.h"
#include "agent/base/utf8.h"

namespace fabric::podsapi {
namespace {

HttpAnswer JsonError(int status, const char* why) {
  return HttpAnswer{status, "application/json", std::string("{\"error\":\"") + why + "\"}\n"};
}

}  // namespace

TlsServer::TlsServer(TlsServerOptions options, TlsHandler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

TlsServer::~TlsServer() { Stop(); }

absl::Status TlsServer::Start() {
  certificate_ = std::make_unique<ServerCertificate>(options_.cert_file, options_.key_file,
                                                     options_.reload_check);
  if (absl::Status s = certificate_->Load(); !s.ok()) return s;
  HttpServerCoreOptions o;
  o.flag = "--pods-tls-address";
  o.log_component = Component::kPods;
  o.max_connections = options_.max_connections;
  o.max_connections_per_peer = options_.max_connections_per_peer;
  o.handshake_timeout = options_.handshake_timeout;
  o.read_timeout = options_.read_timeout;
  o.answer_timeout = options_.answer_timeout;
  o.write_timeout = options_.write_timeout;
  o.json_errors = true;
  o.tls_context = [this] { return certificate_->Current(); };
  core_ = std::make_unique<HttpServerCore>(
      o, [this](uint64_t id, const HttpRequest& r) { Route(id, r); });
  if (absl::Status s = core_->Start(options_.address); !s.ok()) {
    core_.reset();
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  for (int i = 0; i < std::max(1, options_.workers); ++i) workers_.emplace_back([this] { Work(); });
  LogInfo(Component::kPods, "serving /v1/pods over TLS on {} (token and access reviewed)",
          core_->bound_address());
  return absl::OkStatus();
}

void TlsServer::Stop() {
  // The core first: every socket closed at once, no new request routed.
  if (core_) core_->Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
}

void TlsServer::Route(uint64_t id, const HttpRequest& r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() < options_.max_queued) {
      queue_.push_back(Job{id, TlsRequest{r.path, r.query, r.bearer_token}});
      cv_.notify_one();
      return;
    }
  }
  ++dropped_;  // every worker is busy and the queue is full
  core_->Respond(id, JsonError(503, "busy: try again"));
}

void TlsServer::Work() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    HttpAnswer answer;
    try {
      answer = handler_(job.request);
      ++served_;
    } catch (const std::exception& e) {
      LogError(Component::kPods, "/v1/pods handler failed, answered 500: {}",
               EscapeBytes(e.what(), 256));
      answer = JsonError(500, "internal error");
    }
    core_->Respond(job.id, std::move(answer));
  }
}

}  // namespace fabric::podsapi
