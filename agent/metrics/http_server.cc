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

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/base/errors.h"
#include "agent/base/logging.h"
#include "agent/metrics/http_request.h"

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
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
  }
  return "Error";
}

std::shared_ptr<const std::string> Body(std::string s) {
  return std::make_shared<const std::string>(std::move(s));
}

}  // namespace

struct HttpServer::Conn {
  enum State { kReading, kWaiting, kWriting };
  int fd = -1;
  State state = kReading;
  absl::Time deadline;
  bool head_only = false;
  std::string in;
  std::string head;
  std::shared_ptr<const std::string> body;
  size_t sent = 0;  // bytes of head + body written
};

HttpServer::HttpServer(HttpHandlers handlers, absl::Duration metrics_cache,
                       HttpServerOptions options)
    : handlers_(std::move(handlers)), cache_(metrics_cache), options_(options) {}

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
  LogInfo(Component::kMetrics, "serving /metrics /healthz /readyz /v1/node on {}:{}", host, port_);
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

std::shared_ptr<const std::string> HttpServer::FreshMetrics() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_ > absl::ZeroDuration() && cached_ && absl::Now() - cached_at_ < cache_) return cached_;
  return nullptr;
}

size_t HttpServer::cached_metrics_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_ ? cached_->size() : 0;
}

void HttpServer::Work() {
  while (true) {
    std::vector<Job> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A scrape comes every 15-60 s and the cache is good for one second:
      // drop the body when it goes stale instead of keeping it (0.25 MiB at
      // 32 devices, 1 MiB at 128) until the next scrape replaces it.
      while (!stop_ && jobs_.empty()) {
        if (!cached_) {
          jobs_cv_.wait(lock);
          continue;
        }
        const absl::Time stale_at = cached_at_ + cache_;
        if (absl::Now() >= stale_at) {
          cached_.reset();
          // The render's transient memory (per-device sample vectors, label
          // strings) is freed by now but stays in the heap's free lists;
          // return those pages too (glibc; once per scrape, microseconds).
          lock.unlock();
          malloc_trim(0);
          lock.lock();
          continue;
        }
        jobs_cv_.wait_for(lock, absl::ToChronoNanoseconds(stale_at - absl::Now()));
      }
      if (stop_) return;
      batch.push_back(std::move(jobs_.front()));
      jobs_.pop_front();
      if (batch[0].path == "/metrics") {
        // Every /metrics request already waiting shares this render.
        for (auto it = jobs_.begin(); it != jobs_.end();) {
          if (it->path == "/metrics") {
            batch.push_back(std::move(*it));
            it = jobs_.erase(it);
          } else {
            ++it;
          }
        }
      }
    }
    Done d{0, 200, kText, nullptr};
    const std::string& path = batch[0].path;
    if (path == "/metrics") {
      d.content_type = kMetricsType;
      d.body = FreshMetrics();
      if (!d.body) {
        d.body = Body(handlers_.metrics());
        renders_++;
        std::lock_guard<std::mutex> lock(mu_);
        cached_ = d.body;
        cached_at_ = absl::Now();
      }
    } else if (path == "/readyz") {
      std::string why = handlers_.not_ready_reason();
      d.status = why.empty() ? 200 : 503;
      d.body = Body(why.empty() ? "ready\n" : why + "\n");
    } else if (path == "/v1/peers") {
      d.content_type = "application/json";
      d.body = Body(handlers_.peers_json());
    } else {  // /v1/node
      d.content_type = "application/json";
      d.body = Body(handlers_.node_json());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Job& j : batch) {
        Done one = d;
        one.conn_id = j.conn_id;
        done_.push_back(std::move(one));
      }
    }
    Wake();
  }
}

void HttpServer::Loop() {
  std::map<uint64_t, Conn> conns;  // by id: oldest first
  uint64_t next_id = 1;

  auto close_conn = [&](std::map<uint64_t, Conn>::iterator it) {
    ::close(it->second.fd);
    return conns.erase(it);
  };
  auto respond = [&](Conn& c, int status, const char* type,
                     std::shared_ptr<const std::string> body) {
    c.state = Conn::kWriting;
    c.deadline = absl::Now() + options_.write_timeout;
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
  auto enqueue = [&](uint64_t id, Conn& c, const std::string& path) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (jobs_.size() < options_.max_queued) {
        jobs_.push_back({id, path, c.head_only});
        c.state = Conn::kWaiting;
        c.deadline = absl::Now() + options_.queue_timeout;
      }
    }
    if (c.state == Conn::kWaiting) {
      jobs_cv_.notify_one();
    } else {
      respond(c, 503, kText, Body("busy\n"));
    }
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
    } else if (path == "/metrics") {
      if (auto cached = FreshMetrics()) {
        respond(c, 200, kMetricsType, std::move(cached));
      } else {
        enqueue(id, c, path);
      }
    } else if (path == "/readyz" || path == "/v1/node" ||
               (path == "/v1/peers" && handlers_.peers_json)) {
      enqueue(id, c, path);
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
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
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
      c.deadline = absl::Now() + options_.read_timeout;
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
    absl::Time next = absl::Now() + absl::Seconds(1);
    for (auto& [id, c] : conns) {
      short ev = c.state == Conn::kReading ? POLLIN : c.state == Conn::kWriting ? POLLOUT : 0;
      fds.push_back({c.fd, ev, 0});
      ids.push_back(id);
      next = std::min(next, c.deadline);
    }
    const int timeout_ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(next - absl::Now()) + 1));
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
        auto it = conns.find(d.conn_id);
        if (it == conns.end() || it->second.state != Conn::kWaiting) continue;  // gone meanwhile
        respond(it->second, d.status, d.content_type.c_str(), std::move(d.body));
        if (!write_some(it->second)) close_conn(it);
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
    const absl::Time now = absl::Now();
    for (auto it = conns.begin(); it != conns.end();) {
      it = it->second.deadline <= now ? close_conn(it) : std::next(it);
    }
  }
  for (auto& [id, c] : conns) ::close(c.fd);
}

}  // namespace fabric
