#include "agent/podsapi/tls_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/http/request.h"

namespace fabric::podsapi {
namespace {

constexpr size_t kMaxRequestHead = 8192;

void SetTimeouts(int fd, absl::Duration d) {
  const int64_t us = std::max<int64_t>(1000, absl::ToInt64Microseconds(d));
  timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
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

struct timespec MtimeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return st.st_mtim;
}

bool SameTime(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

}  // namespace

TlsServer::TlsServer(TlsServerOptions options, TlsHandler handler)
    : options_(std::move(options)), handler_(std::move(handler)) {}

TlsServer::~TlsServer() { Stop(); }

absl::Status TlsServer::Start() {
  auto ctx = ServerContext(options_.cert_file, options_.key_file);
  if (!ctx.ok()) return ctx.status();
  ctx_ = *std::move(ctx);
  cert_mtime_ = MtimeOf(options_.cert_file);
  key_mtime_ = MtimeOf(options_.key_file);
  next_reload_check_ = MonotonicNow() + options_.reload_check;

  const size_t colon = options_.address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(options_.address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pods-tls-address: '", options_.address, "' is not host:port"));
  }
  std::string host = options_.address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host.empty()) host = "0.0.0.0";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pods-tls-address: cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  absl::Status status = absl::UnavailableError(absl::StrCat("cannot listen on ", options_.address));
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) continue;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 64) != 0) {
      status = absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.address, ": ", std::strerror(errno)));
      continue;
    }
    listen_fd_ = std::move(fd);
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_.get() < 0) return status;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  wake_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  stop_ = false;
  for (int i = 0; i < std::max(1, options_.workers); ++i) workers_.emplace_back([this] { Work(); });
  acceptor_ = std::thread([this] { Accept(); });
  LogInfo(Component::kPods, "serving /v1/pods over TLS on {}:{} (token and access reviewed)", host,
          port_);
  return absl::OkStatus();
}

void TlsServer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (wake_fd_.get() >= 0) {
    uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof(one));
  }
  if (acceptor_.joinable()) acceptor_.join();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  queue_.clear();
}

void TlsServer::Accept() {
  while (true) {
    pollfd fds[2] = {{listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    if (::poll(fds, 2, 1000) < 0 && errno != EINTR) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    if (!(fds[0].revents & POLLIN)) continue;
    while (true) {
      UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (fd.get() < 0) break;
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.size() >= options_.max_queued) {
        ++dropped_;
        continue;  // closed here: the workers are all busy and the queue is full
      }
      queue_.push_back(std::move(fd));
      cv_.notify_one();
    }
  }
}

void TlsServer::Work() {
  while (true) {
    UniqueFd fd;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      fd = std::move(queue_.front());
      queue_.pop_front();
    }
    Handle(std::move(fd));
  }
}

void TlsServer::MaybeReload() {
  // Under mu_.
  const absl::Time now = MonotonicNow();
  if (now < next_reload_check_) return;
  next_reload_check_ = now + options_.reload_check;
  const struct timespec c = MtimeOf(options_.cert_file), k = MtimeOf(options_.key_file);
  if (SameTime(c, cert_mtime_) && SameTime(k, key_mtime_)) return;
  auto ctx = ServerContext(options_.cert_file, options_.key_file);
  if (!ctx.ok()) {
    LogWarn(Component::kPods, "TLS certificate changed but does not load, keeping the old one: {}",
            ctx.status().message());
    return;
  }
  ctx_ = *std::move(ctx);
  cert_mtime_ = c;
  key_mtime_ = k;
  ++reloads_;
  LogInfo(Component::kPods, "TLS certificate reloaded from {}", options_.cert_file);
}

SslPtr TlsServer::NewSsl() {
  std::lock_guard<std::mutex> lock(mu_);
  MaybeReload();
  return SslPtr(SSL_new(ctx_.get()));  // the SSL keeps its own reference to the context
}

void TlsServer::Handle(UniqueFd fd) {
  const absl::Time start = MonotonicNow();
  SetTimeouts(fd.get(), options_.handshake_timeout);
  ERR_clear_error();
  SslPtr ssl = NewSsl();
  if (!ssl || SSL_set_fd(ssl.get(), fd.get()) != 1 || SSL_accept(ssl.get()) != 1) {
    ++tls_failures_;
    ERR_clear_error();
    return;
  }
  std::string in;
  char buf[2048];
  size_t end = std::string::npos;
  int status = 0;
  while (end == std::string::npos) {
    const absl::Duration left = start + options_.read_timeout - MonotonicNow();
    if (left <= absl::ZeroDuration()) {
      ++tls_failures_;
      return;  // the head did not come in time
    }
    SetTimeouts(fd.get(), left);
    const int n = SSL_read(ssl.get(), buf, sizeof(buf));
    if (n <= 0) {
      ++tls_failures_;
      ERR_clear_error();
      return;
    }
    in.append(buf, static_cast<size_t>(n));
    end = in.find("\r\n\r\n");
    if (end == std::string::npos && in.size() > kMaxRequestHead) {
      status = 431;
      break;
    }
  }
  HttpAnswer answer;
  if (status == 431) {
    answer = {431, "application/json", "{\"error\":\"request head too large\"}\n"};
  } else {
    const HttpRequestHead head = ParseRequestHead(absl::string_view(in).substr(0, end));
    if (head.status != 0) {
      answer = {
          head.status, "application/json",
          head.status == 405 ? "{\"error\":\"only GET\"}\n" : "{\"error\":\"bad request\"}\n"};
    } else {
      answer = handler_(TlsRequest{head.path, head.query, head.bearer_token});
    }
  }
  std::string out = absl::StrCat("HTTP/1.1 ", answer.status, " ", Reason(answer.status),
                                 "\r\nContent-Type: ", answer.content_type,
                                 "\r\nContent-Length: ", answer.body.size(),
                                 answer.status == 401 ? "\r\nWWW-Authenticate: Bearer" : "",
                                 "\r\nConnection: close\r\n\r\n", answer.body);
  SetTimeouts(fd.get(), options_.write_timeout);
  size_t sent = 0;
  while (sent < out.size()) {
    const int n = SSL_write(ssl.get(), out.data() + sent, static_cast<int>(out.size() - sent));
    if (n <= 0) {
      ++tls_failures_;
      ERR_clear_error();
      return;
    }
    sent += static_cast<size_t>(n);
  }
  ++served_;
  SSL_shutdown(ssl.get());
  ERR_clear_error();
}

}  // namespace fabric::podsapi
