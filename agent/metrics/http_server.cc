#include "agent/metrics/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/base/errors.h"
#include "agent/base/logging.h"
#include "agent/base/utf8.h"
#include "agent/http/request.h"

namespace fabric {
namespace {

constexpr size_t kMaxRequestHead = 8192;
constexpr char kText[] = "text/plain; charset=utf-8";
constexpr char kMetricsType[] = "text/plain; version=0.0.4; charset=utf-8";

const char* StatusText(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
  }
  return "Error";
}

// /v1/pods names every Pod, its processes and traffic: on this plain port it
// is answered to the node's own loopback clients only; others get it over TLS
// with a token (agent/podsapi).
constexpr char kPodsLoopbackOnly[] =
    "{\"error\": \"/v1/pods is served on this port to loopback clients only; use the agent's "
    "TLS port (--pods-tls-address) with a ServiceAccount token\"}\n";

bool IsLoopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in&>(a).sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return a.ss_family == AF_UNIX;
}

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

struct HttpServer::Conn {
  enum State { kReading, kWaiting, kWriting };
  int fd = -1;
  State state = kReading;
  Clock::time_point deadline;
  bool head_only = false;
  bool loopback = false;  // the peer is on this host's loopback
  std::string in;
  std::string head;
  std::shared_ptr<const std::string> body;
  size_t sent = 0;  // bytes of head + body written
};

HttpServer::HttpServer(HttpHandlers handlers, absl::Duration metrics_cache,
                       HttpServerOptions options)
    : handlers_(std::move(handlers)),
      cache_(std::max(Clock::duration::zero(), std::chrono::duration_cast<Clock::duration>(
                                                   absl::ToChronoNanoseconds(metrics_cache)))),
      options_(options) {}

HttpServer::~HttpServer() { Stop(); }

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

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-address: cannot resolve '", host, "': ", ::gai_strerror(rc)));
  }
  absl::Status status = absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      status = absl::UnavailableError(
          absl::StrCat("cannot listen on ", address, ": ", std::strerror(errno)));
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) return status;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
    return ErrnoError(errno, "eventfd", "(http server)");
  }
  stop_ = false;
  worker_ = std::thread([this] { Work(); });
  loop_ = std::thread([this] { Loop(); });
  LogInfo(Component::kMetrics, "serving /metrics /healthz /readyz /v1/node{}{} on {}:{}",
          handlers_.peers_json ? " /v1/peers" : "", handlers_.pods ? " /v1/pods" : "", host, port_);
  return absl::OkStatus();
}

void HttpServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  jobs_cv_.notify_all();
  Wake();
  if (loop_.joinable()) loop_.join();
  if (worker_.joinable()) worker_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void HttpServer::Wake() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

std::shared_ptr<const std::string> HttpServer::Fresh(View view) {
  std::lock_guard<std::mutex> lock(mu_);
  const Cached& c = cached_[view];
  if (cache_ > Clock::duration::zero() && c.body && Clock::now() - c.at < cache_) return c.body;
  return nullptr;
}

size_t HttpServer::cached_metrics_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_[kMetrics].body ? cached_[kMetrics].body->size() : 0;
}

HttpServer::Done HttpServer::Render(const Job& job) {
  static constexpr const char* kPaths[] = {"/metrics", "/v1/node", "/v1/peers", "/v1/pods"};
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
  const std::string key = view == kPods ? absl::StrCat(job.path, "?", job.query) : "";
  if (!ok) return Done{view, 500, Body(kInternalError), key, kText};
  if (view == kPods) {
    return Done{view, answer.status, Body(std::move(answer.body)), key,
                std::move(answer.content_type)};
  }
  if (view == kMetrics) {
    // The server's own counter, after the agent's families.
    absl::StrAppend(&body,
                    "# HELP fabric_http_handler_errors_total HTTP requests answered 500 because "
                    "their handler failed.\n"
                    "# TYPE fabric_http_handler_errors_total counter\n"
                    "fabric_http_handler_errors_total ",
                    handler_errors_.load(), "\n");
  }
  return Done{view, 200, Body(std::move(body)), "", ""};
}

void HttpServer::Work() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A scrape comes every 15-60 s and the cache is good for one second:
      // drop a body when it goes stale instead of keeping it (0.25 MiB at
      // 32 devices, 1 MiB at 128) until the next request replaces it.
      while (!stop_ && jobs_.empty()) {
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
          // strings) is freed by now but stays in the heap's free lists;
          // return those pages too (glibc; once per scrape, microseconds).
          lock.unlock();
          malloc_trim(0);
          lock.lock();
          continue;
        }
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
    Done d = Render(job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (d.status == 200 && job.view != kPods) cached_[job.view] = Cached{d.body, Clock::now()};
      done_.push_back(std::move(d));
    }
    Wake();
  }
}

void HttpServer::Loop() {
  std::map<uint64_t, Conn> conns;  // by id: oldest first
  uint64_t next_id = 1;
  // Per view: the connections waiting for its render (in the queue or
  // running). Non-empty means a job for it is pending: no second one.
  std::vector<uint64_t> waiters[kViews];
  // /v1/pods: the connections waiting, per path and query.
  std::map<std::string, std::vector<uint64_t>> pod_waiters;
  static constexpr const char* kTypes[] = {kMetricsType, "application/json", "application/json",
                                           "application/json"};

  auto close_conn = [&](std::map<uint64_t, Conn>::iterator it) {
    ::close(it->second.fd);
    return conns.erase(it);
  };
  auto respond = [&](Conn& c, int status, const char* type,
                     std::shared_ptr<const std::string> body) {
    c.state = Conn::kWriting;
    c.deadline = Clock::now() + absl::ToChronoNanoseconds(options_.write_timeout);
    c.head =
        absl::StrCat("HTTP/1.1 ", status, " ", StatusText(status), "\r\nContent-Type: ", type,
                     "\r\nContent-Length: ", body->size(),
                     status == 405 ? "\r\nAllow: GET, HEAD" : "", "\r\nConnection: close\r\n\r\n");
    c.body = c.head_only ? nullptr : std::move(body);
    c.sent = 0;
    c.in.clear();
    c.in.shrink_to_fit();
  };
  // Returns false when the connection is finished (closed by the caller).
  auto write_some = [&](Conn& c) {
    while (true) {
      const size_t body_size = c.body ? c.body->size() : 0;
      const size_t total = c.head.size() + body_size;
      if (c.sent >= total) return false;
      iovec iov[2];
      int n = 0;
      if (c.sent < c.head.size()) {
        iov[n++] = {const_cast<char*>(c.head.data()) + c.sent, c.head.size() - c.sent};
        if (body_size) iov[n++] = {const_cast<char*>(c.body->data()), body_size};
      } else {
        const size_t off = c.sent - c.head.size();
        iov[n++] = {const_cast<char*>(c.body->data()) + off, body_size - off};
      }
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = n;
      ssize_t w = ::sendmsg(c.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.sent += static_cast<size_t>(w);
    }
  };
  // Answers from the cache, or waits for the view's one render.
  auto serve_view = [&](uint64_t id, Conn& c, View view) {
    if (auto cached = Fresh(view)) {
      respond(c, 200, kTypes[view], std::move(cached));
      return;
    }
    c.state = Conn::kWaiting;
    c.deadline = Clock::now() + absl::ToChronoNanoseconds(options_.queue_timeout);
    waiters[view].push_back(id);
    if (waiters[view].size() > 1) return;  // its render is already pending
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(Job{view, "", ""});
    }
    jobs_cv_.notify_one();
  };
  // /v1/pods: one render per path and query, shared by whoever asks meanwhile.
  auto serve_pods = [&](uint64_t id, Conn& c, const std::string& path, const std::string& query) {
    c.state = Conn::kWaiting;
    c.deadline = Clock::now() + absl::ToChronoNanoseconds(options_.queue_timeout);
    std::vector<uint64_t>& w = pod_waiters[absl::StrCat(path, "?", query)];
    w.push_back(id);
    if (w.size() > 1) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(Job{kPods, path, query});
    }
    jobs_cv_.notify_one();
  };
  auto route = [&](uint64_t id, Conn& c, size_t head_end) {
    const HttpRequestHead req = ParseRequestHead(absl::string_view(c.in).substr(0, head_end));
    c.head_only = req.head_only;
    if (req.status == 400) {
      respond(c, 400, kText, Body("bad request\n"));
      return;
    }
    if (req.status == 405) {
      respond(c, 405, kText, Body("only GET and HEAD\n"));
      return;
    }
    const std::string& path = req.path;
    if (path == "/healthz") {
      respond(c, 200, kText, Body("ok\n"));
    } else if (path == "/readyz") {
      // On the loop: cheap by contract (HttpHandlers::not_ready_reason).
      std::string why;
      if (!Guarded("/readyz", handler_errors_, [&] { why = handlers_.not_ready_reason(); })) {
        respond(c, 500, kText, Body(kInternalError));
      } else {
        respond(c, why.empty() ? 200 : 503, kText, Body(why.empty() ? "ready\n" : why + "\n"));
      }
    } else if (path == "/metrics") {
      serve_view(id, c, kMetrics);
    } else if (path == "/v1/node") {
      serve_view(id, c, kNode);
    } else if (path == "/v1/peers" && handlers_.peers_json) {
      serve_view(id, c, kPeers);
    } else if (handlers_.pods && (path == "/v1/pods" || absl::StartsWith(path, "/v1/pods/"))) {
      if (c.loopback) {
        serve_pods(id, c, path, req.query);
      } else {
        respond(c, 403, "application/json", Body(kPodsLoopbackOnly));
      }
    } else {
      respond(c, 404, kText, Body("not found\n"));
    }
  };
  // Returns false when the connection is finished.
  auto read_some = [&](uint64_t id, Conn& c) {
    char buf[4096];
    while (c.state == Conn::kReading) {
      ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.in.append(buf, static_cast<size_t>(n));
      const size_t end = c.in.find("\r\n\r\n");
      if (end != std::string::npos) {
        route(id, c, end);
      } else if (c.in.size() > kMaxRequestHead) {
        c.head_only = false;
        respond(c, 431, kText, Body("request head too large\n"));
      }
    }
    return c.state != Conn::kWriting || write_some(c);
  };
  auto accept_all = [&] {
    while (true) {
      sockaddr_storage peer{};
      socklen_t peer_len = sizeof(peer);
      int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &peer_len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      if (static_cast<int>(conns.size()) >= options_.max_connections) {
        // Make room: the oldest connection that has not sent its request yet,
        // else the oldest of any kind.
        auto victim = conns.begin();
        for (auto it = conns.begin(); it != conns.end(); ++it) {
          if (it->second.state == Conn::kReading) {
            victim = it;
            break;
          }
        }
        if (victim != conns.end()) close_conn(victim);
      }
      const uint64_t id = next_id++;
      Conn& c = conns[id];
      c.fd = fd;
      c.loopback = IsLoopback(peer);
      c.deadline = Clock::now() + absl::ToChronoNanoseconds(options_.read_timeout);
      // A probe's request is usually there already: answer it now.
      if (!read_some(id, c)) close_conn(conns.find(id));
    }
  };

  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!stop_) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    Clock::time_point next = Clock::now() + std::chrono::seconds(1);
    for (auto& [id, c] : conns) {
      short ev = c.state == Conn::kReading ? POLLIN : c.state == Conn::kWriting ? POLLOUT : 0;
      fds.push_back({c.fd, ev, 0});
      ids.push_back(id);
      next = std::min(next, c.deadline);
    }
    const int timeout_ms = static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1));
    int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) {
      LogError(Component::kMetrics, "poll: {}", std::strerror(errno));
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    if (stop_) break;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      (void)!::read(wake_fd_, &v, sizeof(v));
      std::vector<Done> done;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done.swap(done_);
      }
      for (Done& d : done) {
        std::vector<uint64_t> ids_waiting;
        if (d.view == kPods) {
          auto w = pod_waiters.find(d.key);
          if (w != pod_waiters.end()) {
            ids_waiting.swap(w->second);
            pod_waiters.erase(w);
          }
        } else {
          ids_waiting.swap(waiters[d.view]);
        }
        const char* type = d.view == kPods   ? d.content_type.c_str()
                           : d.status == 200 ? kTypes[d.view]
                                             : kText;
        for (uint64_t id : ids_waiting) {
          auto it = conns.find(id);
          if (it == conns.end() || it->second.state != Conn::kWaiting) continue;  // gone meanwhile
          respond(it->second, d.status, type, d.body);
          if (!write_some(it->second)) close_conn(it);
        }
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto it = conns.find(ids[i - 2]);
      if (it == conns.end()) continue;
      Conn& c = it->second;
      bool keep = true;
      if (fds[i].revents & (POLLERR | POLLNVAL)) {
        keep = false;
      } else if (c.state == Conn::kReading) {
        keep = read_some(it->first, c);
      } else if (c.state == Conn::kWriting) {
        keep = write_some(c);
      } else if (fds[i].revents & POLLHUP) {
        keep = false;  // waiting for the worker, but the client left
      }
      if (!keep) close_conn(it);
    }
    if (fds[1].revents & POLLIN) accept_all();
    const Clock::time_point now = Clock::now();
    for (auto it = conns.begin(); it != conns.end();) {
      it = it->second.deadline <= now ? close_conn(it) : std::next(it);
    }
  }
  for (auto& [id, c] : conns) ::close(c.fd);
}

}  // namespace fabric
