#include "agent/http/client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/base/mono_clock.h"
#include "agent/http/net.h"

namespace fabric {
namespace {

constexpr size_t kMaxResponseHead = 64 << 10;

bool IsIp(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// A request the server may receive twice without harm (RFC 9110 9.2.2).
bool Idempotent(absl::string_view method) {
  return method == "GET" || method == "HEAD" || method == "PUT" || method == "DELETE" ||
         method == "OPTIONS";
}

}  // namespace

struct HttpClient::Connection {
  UniqueFd fd;
  SslPtr ssl;  // https only; freed before fd is closed
  absl::Time idle_since;
};

// One Send: its deadline, and the eventfd a Canceller writes to wake it.
class HttpClient::Exchange {
 public:
  Exchange(const HttpClientRequest& r, const std::string& authority)
      : deadline_(MonotonicNow() + r.timeout),
        timeout_(r.timeout),
        cancel_(r.cancel),
        authority_(authority) {
    if (cancel_ == nullptr) return;
    wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    const int fd = wake_.get();
    guard_.emplace(cancel_, [fd] {
      uint64_t one = 1;
      (void)!::write(fd, &one, sizeof(one));
    });
  }

  absl::Time deadline() const { return deadline_; }
  bool cancelled() const { return cancel_ != nullptr && cancel_->cancelled(); }

  // Waits until `fd` is ready for `events` (or has an error), at most until
  // `until` (never past the exchange's deadline).
  absl::Status Wait(int fd, short events, absl::Time until, absl::string_view what) {
    until = std::min(until, deadline_);
    while (true) {
      if (cancelled()) return absl::CancelledError(absl::StrCat(authority_, ": cancelled"));
      const int64_t ms = absl::ToInt64Milliseconds(until - MonotonicNow());
      if (ms <= 0) {
        return absl::DeadlineExceededError(absl::StrCat(
            authority_, ": ", what,
            until == deadline_ ? absl::StrCat(" within ", absl::FormatDuration(timeout_)) : ""));
      }
      pollfd p[2] = {{fd, events, 0}, {wake_.get(), POLLIN, 0}};
      const int n =
          ::poll(p, wake_.get() >= 0 ? 2 : 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
      if (n < 0 && errno != EINTR) {
        return absl::UnavailableError(absl::StrCat(authority_, ": poll: ", std::strerror(errno)));
      }
      if (n > 0 && p[0].revents != 0) return absl::OkStatus();
    }
  }
  absl::Status Wait(int fd, short events, absl::string_view what) {
    return Wait(fd, events, deadline_, what);
  }

 private:
  const absl::Time deadline_;
  const absl::Duration timeout_;
  Canceller* const cancel_;
  const std::string& authority_;
  UniqueFd wake_;
  std::optional<Canceller::WakerGuard> guard_;
};

namespace {

// Reads some bytes: their count, or 0 at the end of the stream.
absl::StatusOr<size_t> ReadSome(int fd, SSL* ssl, char* buf, size_t len,
                                std::function<absl::Status(short)> wait,
                                const std::string& authority) {
  while (true) {
    if (ssl != nullptr) {
      ERR_clear_error();
      const int n = SSL_read(ssl, buf, static_cast<int>(std::min<size_t>(len, INT_MAX)));
      if (n > 0) return static_cast<size_t>(n);
      const int err = SSL_get_error(ssl, n);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        if (absl::Status s = wait(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT); !s.ok()) return s;
        continue;
      }
      if (err == SSL_ERROR_ZERO_RETURN || (err == SSL_ERROR_SYSCALL && errno == 0)) return 0;
      return OpenSslError(absl::StrCat("TLS read from ", authority),
                          absl::StatusCode::kUnavailable);
    }
    const ssize_t n = ::recv(fd, buf, len, MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (!TransientErrno(errno)) {
      return absl::UnavailableError(
          absl::StrCat("read from ", authority, ": ", std::strerror(errno)));
    }
    if (absl::Status s = wait(POLLIN); !s.ok()) return s;
  }
}

absl::Status WriteAll(int fd, SSL* ssl, absl::string_view data,
                      std::function<absl::Status(short)> wait, const std::string& authority) {
  while (!data.empty()) {
    if (ssl != nullptr) {
      ERR_clear_error();
      const int n =
          SSL_write(ssl, data.data(), static_cast<int>(std::min<size_t>(data.size(), INT_MAX)));
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      const int err = SSL_get_error(ssl, n);
      if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
        if (absl::Status s = wait(err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT); !s.ok()) return s;
        continue;
      }
      return OpenSslError(absl::StrCat("TLS write to ", authority), absl::StatusCode::kUnavailable);
    }
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
    } else if (n < 0 && !TransientErrno(errno)) {
      return absl::UnavailableError(
          absl::StrCat("write to ", authority, ": ", std::strerror(errno)));
    } else if (absl::Status s = wait(POLLOUT); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

HttpClient::HttpClient(HttpClientOptions options) : options_(std::move(options)) {}

HttpClient::~HttpClient() = default;

absl::StatusOr<std::unique_ptr<HttpClient>> HttpClient::Create(HttpClientOptions options) {
  std::unique_ptr<HttpClient> c(new HttpClient(std::move(options)));
  absl::string_view rest = c->options_.base_url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    c->tls_ = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", c->options_.base_url, "' is not http(s)://host[:port]"));
  }
  while (absl::ConsumeSuffix(&rest, "/")) {
  }
  c->port_ = c->tls_ ? 443 : 80;
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.rfind(']');
  if (colon != absl::string_view::npos && (bracket == absl::string_view::npos || colon > bracket)) {
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &c->port_) || c->port_ <= 0 || c->port_ > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("'", c->options_.base_url, "': bad port"));
    }
    rest = rest.substr(0, colon);
  }
  c->host_ = std::string(rest);
  if (c->host_.size() >= 2 && c->host_.front() == '[' && c->host_.back() == ']') {
    c->host_ = c->host_.substr(1, c->host_.size() - 2);
  }
  if (c->host_.empty() || c->host_.find_first_of("/?#@ ") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", c->options_.base_url, "' is not http(s)://host[:port]"));
  }
  const bool v6 = c->host_.find(':') != std::string::npos;
  c->authority_ = absl::StrCat(v6 ? "[" : "", c->host_, v6 ? "]" : "", ":", c->port_);
  if (c->tls_) (void)c->Context();  // loaded now if it can be
  return c;
}

absl::StatusOr<SSL_CTX*> HttpClient::Context() {
  std::lock_guard<std::mutex> lock(mu_);
  if (ctx_) return ctx_.get();
  auto ctx = ClientContext(options_.ca_file, options_.insecure);
  if (!ctx.ok()) return ctx.status();
  // A server that closes without close_notify ends a body framed by the
  // connection's end; the framing, not the alert, tells a cut-off answer.
  SSL_CTX_set_options(ctx->get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  ctx_ = *std::move(ctx);
  return ctx_.get();
}

absl::StatusOr<std::unique_ptr<HttpClient::Connection>> HttpClient::Connect(Exchange& ex) {
  SSL_CTX* ctx = nullptr;
  if (tls_) {
    auto loaded = Context();
    if (!loaded.ok()) return loaded.status();
    ctx = *loaded;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host_.c_str(), absl::StrCat(port_).c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host_, ": ", gai_strerror(rc)));
  }
  const absl::Time connect_by = MonotonicNow() + options_.connect_timeout;
  absl::Status last = absl::UnavailableError(absl::StrCat("cannot connect to ", authority_));
  auto c = std::make_unique<Connection>();
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) continue;
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      absl::Status s = ex.Wait(fd.get(), POLLOUT, connect_by, "connect timed out");
      if (!s.ok()) {
        last = s;
        if (s.code() == absl::StatusCode::kCancelled) break;
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      last = absl::UnavailableError(
          absl::StrCat("cannot connect to ", authority_, ": ", std::strerror(errno)));
      continue;
    }
    c->fd = std::move(fd);
    break;
  }
  ::freeaddrinfo(res);
  if (c->fd.get() < 0) return last;
  int one = 1, idle = 30, interval = 10, count = 3;
  ::setsockopt(c->fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // A silent, half-dead connection (a watch between events) is noticed in
  // about a minute rather than at the exchange's deadline.
  ::setsockopt(c->fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(c->fd.get(), IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(c->fd.get(), IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(c->fd.get(), IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  if (!tls_) return c;

  ERR_clear_error();
  c->ssl.reset(SSL_new(ctx));
  if (!c->ssl || !SslSetSocket(c->ssl.get(), c->fd.get())) return OpenSslError("SSL_new");
  SSL_set_mode(c->ssl.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  const std::string name = options_.server_name.empty() ? host_ : options_.server_name;
  if (!options_.insecure) {
    X509_VERIFY_PARAM* param = SSL_get0_param(c->ssl.get());
    if (IsIp(name)) {
      X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    }
  }
  if (!IsIp(name)) SSL_set_tlsext_host_name(c->ssl.get(), name.c_str());
  while (true) {
    ERR_clear_error();
    const int rc = SSL_connect(c->ssl.get());
    if (rc == 1) return c;
    const int err = SSL_get_error(c->ssl.get(), rc);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      absl::Status s = ex.Wait(c->fd.get(), err == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT,
                               connect_by, "TLS handshake timed out");
      if (!s.ok()) return s;
      continue;
    }
    const long verify = SSL_get_verify_result(c->ssl.get());
    if (verify != X509_V_OK) {
      ERR_clear_error();
      return absl::FailedPreconditionError(
          absl::StrCat("TLS: the server's certificate (", authority_, ") does not verify as '",
                       name, "' against ",
                       options_.ca_file.empty() ? "the system's CAs"
                                                : absl::StrCat("CA file ", options_.ca_file),
                       ": ", X509_verify_cert_error_string(verify)));
    }
    return OpenSslError(absl::StrCat("TLS handshake with ", authority_),
                        absl::StatusCode::kUnavailable);
  }
}

absl::StatusOr<std::unique_ptr<HttpClient::Connection>> HttpClient::Take(Exchange& ex,
                                                                         bool* reused) {
  *reused = false;
  std::vector<std::unique_ptr<Connection>> stale;  // closed outside the lock
  {
    std::lock_guard<std::mutex> lock(mu_);
    const absl::Time now = MonotonicNow();
    while (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      // Readable while idle: the server closed it (or sent what we did not
      // ask for). Either way it cannot carry a request.
      pollfd p{c->fd.get(), POLLIN, 0};
      if (now - c->idle_since > options_.max_idle || ::poll(&p, 1, 0) != 0) {
        stale.push_back(std::move(c));
        continue;
      }
      *reused = true;
      return c;
    }
  }
  return Connect(ex);
}

void HttpClient::Give(std::unique_ptr<Connection> c) {
  c->idle_since = MonotonicNow();
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < options_.max_idle_connections) idle_.push_back(std::move(c));
}

absl::StatusOr<HttpClientResponse> HttpClient::SendOn(Connection& c, Exchange& ex,
                                                      const HttpClientRequest& request,
                                                      bool* reusable, bool* nothing_received) {
  *reusable = false;
  *nothing_received = true;
  auto wait = [&](short events) {
    return ex.Wait(c.fd.get(), events, "no complete answer in time");
  };
  const bool sends_length =
      request.body != nullptr ||
      (request.method != "GET" && request.method != "HEAD" && request.method != "DELETE");
  std::string out = WriteRequestHead(
      request.method, request.target, authority_, request.headers,
      sends_length ? static_cast<int64_t>(request.body ? request.body->size() : 0) : -1);
  if (request.body != nullptr) out += *request.body;
  if (absl::Status s = WriteAll(c.fd.get(), c.ssl.get(), out, wait, authority_); !s.ok()) return s;

  std::string in;
  char buf[16384];
  auto read_more = [&]() -> absl::StatusOr<bool> {  // false at the end of the stream
    auto n = ReadSome(c.fd.get(), c.ssl.get(), buf, sizeof(buf), wait, authority_);
    if (!n.ok()) return n.status();
    if (*n > 0) *nothing_received = false;
    in.append(buf, *n);
    return *n > 0;
  };
  // The head, after any 1xx.
  HttpResponseHead head;
  while (true) {
    const size_t end = in.find("\r\n\r\n");
    if (end == std::string::npos) {
      if (in.size() > kMaxResponseHead) {
        return absl::DataLossError(absl::StrCat(authority_, ": a response head over 64 KiB"));
      }
      auto more = read_more();
      if (!more.ok()) return more.status();
      if (!*more) {
        return absl::UnavailableError(absl::StrCat(
            authority_, in.empty() ? ": the connection closed before an answer"
                                   : ": the connection closed inside the answer's head"));
      }
      continue;
    }
    auto h = ParseResponseHead(absl::string_view(in).substr(0, end));
    if (!h.ok()) return absl::DataLossError(absl::StrCat(authority_, ": ", h.status().message()));
    in.erase(0, end + 4);
    if (h->status >= 200) {
      head = *h;
      break;
    }
  }

  HttpClientResponse response;
  response.status = head.status;
  const bool stream = request.on_body != nullptr && head.status == 200;
  // Takes decoded body bytes; false when the exchange ends here.
  absl::Status sink_error;
  auto sink = [&](absl::string_view data) {
    if (data.empty()) return true;
    if (stream) {
      if (request.on_body(data)) return true;
      response.stopped = true;
      return false;
    }
    if (response.body.size() + data.size() > request.max_body_bytes) {
      sink_error = absl::ResourceExhaustedError(absl::StrCat(
          authority_, ": the answer is larger than ", request.max_body_bytes, " bytes"));
      return false;
    }
    response.body.append(data.data(), data.size());
    return true;
  };
  // on_body said stop (OK, response.stopped), or the body is over its bound.
  auto ended_early = [&]() -> absl::StatusOr<HttpClientResponse> {
    if (!sink_error.ok()) return sink_error;
    return response;
  };
  auto cut_off = [&] {
    return absl::UnavailableError(absl::StrCat(authority_, ": the answer ended early"));
  };
  if (ResponseHasNoBody(request.method, head.status)) {
    *reusable = !head.close && in.empty();
    return response;
  }
  if (head.chunked) {
    ChunkedDecoder decoder;
    std::string data;
    while (true) {
      data.clear();
      auto used = decoder.Feed(in, &data);
      if (!used.ok())
        return absl::DataLossError(absl::StrCat(authority_, ": ", used.status().message()));
      in.erase(0, *used);
      if (!sink(data)) return ended_early();
      if (decoder.done()) break;
      auto more = read_more();
      if (!more.ok()) return more.status();
      if (!*more) return cut_off();
    }
    *reusable = !head.close && in.empty();
    return response;
  }
  if (head.content_length >= 0) {
    uint64_t left = static_cast<uint64_t>(head.content_length);
    if (!stream && left > request.max_body_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(authority_, ": the answer is larger than ",
                                                       request.max_body_bytes, " bytes"));
    }
    while (true) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, in.size()));
      const bool more_after = in.size() > n;
      if (!sink(absl::string_view(in).substr(0, n))) {
        return ended_early();
      }
      in.erase(0, n);
      left -= n;
      if (left == 0) {
        *reusable = !head.close && !more_after;
        return response;
      }
      auto more = read_more();
      if (!more.ok()) return more.status();
      if (!*more) return cut_off();
    }
  }
  // Framed by the end of the connection.
  while (true) {
    if (!sink(in)) return ended_early();
    in.clear();
    auto more = read_more();
    if (!more.ok()) return more.status();
    if (!*more) return response;
  }
}

absl::StatusOr<HttpClientResponse> HttpClient::Send(const HttpClientRequest& request) {
  Exchange ex(request, authority_);
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    auto c = Take(ex, &reused);
    if (!c.ok()) return c.status();
    bool reusable = false, nothing_received = true;
    auto r = SendOn(**c, ex, request, &reusable, &nothing_received);
    if (r.ok()) {
      if (reusable) Give(*std::move(c));
      return r;
    }
    // A kept-alive connection the server closed as we sent: the request was
    // not read, so one more try on a new connection is safe when the method
    // allows a repeat anyway.
    if (attempt == 0 && reused && nothing_received &&
        r.status().code() == absl::StatusCode::kUnavailable && Idempotent(request.method)) {
      continue;
    }
    return r.status();
  }
}

}  // namespace fabric
