#include "agent/metrics/http_server.h"

#include <malloc.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/base/utf8.h"

namespace fabric {
namespace {

constexpr char kText[] = "text/plain; charset=utf-8";
constexpr char kJson[] = "application/json";
constexpr const char* kPaths[] = {"/metrics", "/v1/node", "/v1/peers", "/v1/pods"};
constexpr const char* kTypes[] = {"text/plain; version=0.0.4; charset=utf-8", kJson, kJson, kJson};

// /v1/pods names every Pod, its processes and traffic: on this plain port it
// is answered to the node's own loopback clients only; others get it over TLS
// with a token (agent/podsapi).
constexpr char kPodsLoopbackOnly[] =
    "{\"error\": \"/v1/pods is served on this port to loopback clients only; use the agent's "
    "TLS port (--pods-tls-address) with a ServiceAccount token\"}\n";

std::shared_ptr<const std::string> Body(std::string s) {
  return std::make_shared<const std::string>(std::move(s));
}

// The body of a 500: short, and never the exception's text (it may hold
// bytes from a peer; the log has it, escaped).
constexpr char kInternalError[] = "internal error\n";

// Runs `fn`; on an exception logs it (the first, then every 100th, so a
// handler failing on every request cannot flood the log), counts it and
// returns false.
template <typename Fn>
bool Guarded(const char* what, std::atomic<uint64_t>& errors, Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const std::exception& e) {
    if (errors++ % 100 == 0) {
      LogError(Component::kMetrics, "{} handler failed, answered 500 ({} so far): {}", what,
               errors.load(), EscapeBytes(e.what(), 256));
    }
  } catch (...) {
    if (errors++ % 100 == 0) {
      LogError(Component::kMetrics, "{} handler failed, answered 500 ({} so far)", what,
               errors.load());
    }
  }
  return false;
}

}  // namespace

HttpServer::HttpServer(HttpHandlers handlers, absl::Duration metrics_cache,
                       HttpServerOptions options)
    : handlers_(std::move(handlers)),
      cache_(std::max(Clock::duration::zero(), std::chrono::duration_cast<Clock::duration>(
                                                   absl::ToChronoNanoseconds(metrics_cache)))),
      options_(options) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start(const std::string& address) {
  HttpServerCoreOptions o;
  o.flag = "--metrics-address";
  o.log_component = Component::kMetrics;
  o.max_connections = options_.max_connections;
  o.read_timeout = options_.read_timeout;
  o.write_timeout = options_.write_timeout;
  o.answer_timeout = options_.queue_timeout;
  core_ = std::make_unique<HttpServerCore>(
      o, [this](uint64_t id, const HttpRequest& r) { Route(id, r); });
  if (absl::Status s = core_->Start(address); !s.ok()) {
    core_.reset();
    return s;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = false;
  }
  worker_ = std::thread([this] { Work(); });
  LogInfo(Component::kMetrics, "serving /metrics /healthz /readyz /v1/node{}{} on {}",
          handlers_.peers_json ? " /v1/peers" : "", handlers_.pods ? " /v1/pods" : "",
          core_->bound_address());
  return absl::OkStatus();
}

void HttpServer::Stop() {
  // The core first: no route runs after it, and no socket is left open.
  if (core_) core_->Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  jobs_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

size_t HttpServer::cached_metrics_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_[kMetrics].body ? cached_[kMetrics].body->size() : 0;
}

void HttpServer::Route(uint64_t id, const HttpRequest& r) {
  const std::string& path = r.path;
  if (path == "/healthz") {
    core_->Respond(id, 200, kText, Body("ok\n"));
  } else if (path == "/readyz") {
    // On the loop: cheap by contract (HttpHandlers::not_ready_reason).
    std::string why;
    if (!Guarded("/readyz", handler_errors_, [&] { why = handlers_.not_ready_reason(); })) {
      core_->Respond(id, 500, kText, Body(kInternalError));
    } else {
      core_->Respond(id, why.empty() ? 200 : 503, kText,
                     Body(why.empty() ? "ready\n" : why + "\n"));
    }
  } else if (path == "/metrics") {
    ServeView(id, kMetrics);
  } else if (path == "/v1/node") {
    ServeView(id, kNode);
  } else if (path == "/v1/peers" && handlers_.peers_json) {
    ServeView(id, kPeers);
  } else if (handlers_.pods && (path == "/v1/pods" || absl::StartsWith(path, "/v1/pods/"))) {
    if (r.loopback) {
      ServePods(id, path, r.query);
    } else {
      core_->Respond(id, 403, kJson, Body(kPodsLoopbackOnly));
    }
  } else {
    core_->Respond(id, 404, kText, Body("not found\n"));
  }
}

void HttpServer::ServeView(uint64_t id, View view) {
  std::shared_ptr<const std::string> cached;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Cached& c = cached_[view];
    if (cache_ > Clock::duration::zero() && c.body && Clock::now() - c.at < cache_) {
      cached = c.body;
    } else {
      std::vector<uint64_t>& w = waiters_[kPaths[view]];
      w.push_back(id);
      if (w.size() > 1) return;  // its render is already pending
      jobs_.push_back(Job{view, "", ""});
    }
  }
  if (cached) {
    core_->Respond(id, 200, kTypes[view], std::move(cached));
  } else {
    jobs_cv_.notify_one();
  }
}

void HttpServer::ServePods(uint64_t id, const std::string& path, const std::string& query) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<uint64_t>& w = waiters_[absl::StrCat(path, "?", query)];
    w.push_back(id);
    if (w.size() > 1) return;
    jobs_.push_back(Job{kPods, path, query});
  }
  jobs_cv_.notify_one();
}

void HttpServer::Render(const Job& job) {
  const View view = job.view;
  std::string body;
  HttpAnswer answer;
  const bool ok = Guarded(kPaths[view], handler_errors_, [&] {
    switch (view) {
      case kPods:
        answer = handlers_.pods(job.path, job.query);
        break;
      case kMetrics:
        body = handlers_.metrics();
        break;
      case kNode:
        body = handlers_.node_json();
        break;
      default:
        body = handlers_.peers_json();
        break;
    }
  });
  renders_++;
  int status = 200;
  std::string type = kTypes[view];
  if (!ok) {
    status = 500;
    type = kText;
    body = kInternalError;
  } else if (view == kPods) {
    status = answer.status;
    type = std::move(answer.content_type);
    body = std::move(answer.body);
  } else if (view == kMetrics) {
    // The server's own counter, after the agent's families.
    absl::StrAppend(&body,
                    "# HELP fabric_http_handler_errors_total HTTP requests answered 500 because "
                    "their handler failed.\n"
                    "# TYPE fabric_http_handler_errors_total counter\n"
                    "fabric_http_handler_errors_total ",
                    handler_errors_.load(), "\n");
  }
  std::shared_ptr<const std::string> shared = Body(std::move(body));
  std::vector<uint64_t> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (status == 200 && view != kPods) cached_[view] = Cached{shared, Clock::now()};
    auto w = waiters_.find(view == kPods ? absl::StrCat(job.path, "?", job.query) : kPaths[view]);
    if (w != waiters_.end()) {
      waiting.swap(w->second);
      waiters_.erase(w);
    }
  }
  for (uint64_t id : waiting) core_->Respond(id, status, type, shared);
}

HttpServer::Clock::time_point HttpServer::DropStale(std::unique_lock<std::mutex>& lock) {
  // A scrape comes every 15-60 s and the cache is good for one second: drop
  // a body when it goes stale instead of keeping it (0.25 MiB at 32 devices,
  // 1 MiB at 128) until the next request replaces it.
  bool dropped = false;
  Clock::time_point next = Clock::time_point::max();
  const Clock::time_point now = Clock::now();
  for (Cached& c : cached_) {
    if (!c.body) continue;
    if (now - c.at >= cache_) {
      c.body.reset();
      dropped = true;
    } else {
      next = std::min(next, c.at + cache_);
    }
  }
  if (dropped) {
    // The render's transient memory (per-device sample vectors, label
    // strings) is freed by now but stays in the heap's free lists; return
    // those pages too (glibc; once per scrape, microseconds).
    lock.unlock();
    malloc_trim(0);
    lock.lock();
  }
  return next;
}

void HttpServer::Work() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_ && jobs_.empty()) {
        const Clock::time_point next = DropStale(lock);
        if (stop_ || !jobs_.empty()) break;
        if (next == Clock::time_point::max()) {
          jobs_cv_.wait(lock);
        } else {
          jobs_cv_.wait_until(lock, next);
        }
      }
      if (stop_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Render(job);
  }
}

}  // namespace fabric
