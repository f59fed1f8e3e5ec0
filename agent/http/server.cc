#include "agent/http/server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/base/errors.h"
#include "agent/http/openssl.h"
#include "agent/http/request.h"

namespace fabric {
namespace {

constexpr size_t kMaxRequestHead = 8192;
constexpr char kText[] = "text/plain; charset=utf-8";

std::shared_ptr<const std::string> Body(std::string s) {
  return std::make_shared<const std::string>(std::move(s));
}

// The result of one non-blocking read or write.
enum class Io { kProgress, kAgain, kPeerClosed, kFailed };

}  // namespace

struct HttpServerCore::Conn {
  enum State { kHandshake, kReading, kRouted, kWriting };
  UniqueFd fd;
  SslPtr ssl;  // TLS only; freed before fd is closed
  State state = kReading;
  Clock::time_point connected, deadline;
  std::string peer;  // PeerKey
  bool loopback = false;
  bool head_only = false;
  short wants = POLLIN;                     // what the next I/O waits for (TLS may want either way)
  std::string in;                           // the request head as it arrives
  std::string head;                         // the response head
  std::shared_ptr<const std::string> body;  // null for HEAD
  size_t sent = 0;                          // bytes of head + body written
};

// Everything the loop thread owns: the connections and the listener's pause.
class HttpServerCore::Loop {
 public:
  explicit Loop(HttpServerCore& core) : core_(core), o_(core.options_) {}
  void Run();

 private:
  using Conns = std::map<uint64_t, Conn>;  // by id: oldest first

  static bool Unrouted(const Conn& c) {
    return c.state == Conn::kHandshake || c.state == Conn::kReading;
  }
  Conns::iterator Close(Conns::iterator it);
  void Accept();
  // Frees a slot for a new connection from `peer`; false: refuse it.
  bool MakeRoom(const std::string& peer);
  void Add(UniqueFd fd, const sockaddr_storage& peer);
  // Each returns false when the connection is finished (the caller closes it).
  bool Advance(uint64_t id, Conn& c, short revents);
  bool Handshake(uint64_t id, Conn& c);
  bool ReadHead(uint64_t id, Conn& c);
  bool WriteSome(Conn& c);
  void RouteHead(uint64_t id, Conn& c, size_t head_end);
  void Answer(Conn& c, int status, const std::string& type,
              std::shared_ptr<const std::string> body);
  void AnswerError(Conn& c, int status, const char* why);
  void ApplyAnswers();
  void Expire();
  Io Read(Conn& c, char* buf, size_t len, size_t* got);
  Io Write(Conn& c, size_t* wrote);
  Io SslResult(Conn& c, int rc);
  Clock::duration Chrono(absl::Duration d) const {
    return std::chrono::duration_cast<Clock::duration>(absl::ToChronoNanoseconds(d));
  }

  HttpServerCore& core_;
  const HttpServerCoreOptions& o_;
  Conns conns_;
  std::map<std::string, int> per_peer_;
  uint64_t next_id_ = 1;
  Clock::time_point listen_paused_until_{};
};

HttpServerCore::Loop::Conns::iterator HttpServerCore::Loop::Close(Conns::iterator it) {
  auto pc = per_peer_.find(it->second.peer);
  if (pc != per_peer_.end() && --pc->second <= 0) per_peer_.erase(pc);
  return conns_.erase(it);  // frees the SSL, then closes the socket
}

void HttpServerCore::Loop::Accept() {
  while (true) {
    sockaddr_storage peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(core_.listen_fd_.get(), reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      Add(UniqueFd(fd), peer);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      // The connection stays in the backlog and the listener stays readable:
      // polling it again at once would spin. Serve the open ones meanwhile.
      listen_paused_until_ = Clock::now() + Chrono(o_.accept_backoff);
      if (core_.accept_pauses_++ % 100 == 0) {
        LogWarn(o_.log_component, "{}: accept: {}; not accepting for {} ({} times so far)", o_.flag,
                std::strerror(errno), absl::FormatDuration(o_.accept_backoff),
                core_.accept_pauses_.load());
      }
    }
    return;  // EAGAIN: no more; anything else: the next poll tries again
  }
}

bool HttpServerCore::Loop::MakeRoom(const std::string& peer) {
  if (o_.max_connections_per_peer > 0) {
    auto pc = per_peer_.find(peer);
    if (pc != per_peer_.end() && pc->second >= o_.max_connections_per_peer) {
      // The same rule as at the global cap, within this client's connections.
      auto victim = std::find_if(conns_.begin(), conns_.end(), [&](const auto& kv) {
        return kv.second.peer == peer && Unrouted(kv.second);
      });
      if (victim == conns_.end()) return false;  // all of them are being answered
      Close(victim);
      ++core_.evicted_;
    }
  }
  if (static_cast<int>(conns_.size()) >= o_.max_connections && !conns_.empty()) {
    auto victim = std::find_if(conns_.begin(), conns_.end(),
                               [](const auto& kv) { return Unrouted(kv.second); });
    Close(victim != conns_.end() ? victim : conns_.begin());
    ++core_.evicted_;
  }
  return true;
}

void HttpServerCore::Loop::Add(UniqueFd fd, const sockaddr_storage& peer) {
  std::string key = PeerKey(peer);
  if (!MakeRoom(key)) {
    ++core_.evicted_;
    return;  // closed here
  }
  ++core_.accepted_;
  // Head and body go out as they are ready; no wait for the peer's ACK.
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  const uint64_t id = next_id_++;
  Conn& c = conns_[id];
  c.fd = std::move(fd);
  c.loopback = IsLoopback(peer);
  c.connected = Clock::now();
  c.deadline = c.connected + Chrono(o_.read_timeout);
  ++per_peer_[key];
  c.peer = std::move(key);
  if (o_.tls_context) {
    ERR_clear_error();
    c.ssl.reset(SSL_new(o_.tls_context()));  // the SSL keeps its own reference to the context
    if (!c.ssl || !SslSetSocket(c.ssl.get(), c.fd.get())) {
      ERR_clear_error();
      ++core_.tls_failures_;
      Close(conns_.find(id));
      return;
    }
    SSL_set_mode(c.ssl.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    c.state = Conn::kHandshake;
    c.deadline = c.connected + Chrono(std::min(o_.handshake_timeout, o_.read_timeout));
  }
  // A probe's request (or a TLS client's hello) is usually there already.
  if (!Advance(id, c, 0)) Close(conns_.find(id));
}

bool HttpServerCore::Loop::Advance(uint64_t id, Conn& c, short revents) {
  if (revents & (POLLERR | POLLNVAL)) return false;
  switch (c.state) {
    case Conn::kHandshake:
      return Handshake(id, c);
    case Conn::kReading:
      return ReadHead(id, c);
    case Conn::kWriting:
      return WriteSome(c);
    case Conn::kRouted:
      return !(revents & POLLHUP);  // waiting for the route, but the client left
  }
  return false;
}

Io HttpServerCore::Loop::SslResult(Conn& c, int rc) {
  switch (SSL_get_error(c.ssl.get(), rc)) {
    case SSL_ERROR_WANT_READ:
      c.wants = POLLIN;
      return Io::kAgain;
    case SSL_ERROR_WANT_WRITE:
      c.wants = POLLOUT;
      return Io::kAgain;
    case SSL_ERROR_ZERO_RETURN:
      return Io::kPeerClosed;
    default:
      ERR_clear_error();
      ++core_.tls_failures_;
      return Io::kFailed;
  }
}

bool HttpServerCore::Loop::Handshake(uint64_t id, Conn& c) {
  ERR_clear_error();
  const int rc = SSL_accept(c.ssl.get());
  if (rc == 1) {
    c.state = Conn::kReading;
    c.deadline = c.connected + Chrono(o_.read_timeout);
    c.wants = POLLIN;
    return ReadHead(id, c);  // the request may have come with the handshake's last flight
  }
  return SslResult(c, rc) == Io::kAgain;
}

Io HttpServerCore::Loop::Read(Conn& c, char* buf, size_t len, size_t* got) {
  if (c.ssl) {
    ERR_clear_error();
    const int n = SSL_read(c.ssl.get(), buf, static_cast<int>(std::min<size_t>(len, INT_MAX)));
    if (n <= 0) return SslResult(c, n);
    *got = static_cast<size_t>(n);
    return Io::kProgress;
  }
  const ssize_t n = ::recv(c.fd.get(), buf, len, MSG_DONTWAIT);
  if (n > 0) {
    *got = static_cast<size_t>(n);
    return Io::kProgress;
  }
  if (n == 0) return Io::kPeerClosed;
  c.wants = POLLIN;
  return TransientErrno(errno) ? Io::kAgain : Io::kFailed;
}

bool HttpServerCore::Loop::ReadHead(uint64_t id, Conn& c) {
  char buf[4096];
  while (c.state == Conn::kReading) {
    size_t n = 0;
    const Io io = Read(c, buf, sizeof(buf), &n);
    if (io == Io::kAgain) return true;
    if (io != Io::kProgress) return false;
    c.in.append(buf, n);
    const size_t end = c.in.find("\r\n\r\n");
    if (end != std::string::npos) {
      RouteHead(id, c, end);
    } else if (c.in.size() > kMaxRequestHead) {
      c.head_only = false;
      AnswerError(c, 431, "request head too large");
    }
  }
  return c.state != Conn::kWriting || WriteSome(c);
}

void HttpServerCore::Loop::RouteHead(uint64_t id, Conn& c, size_t head_end) {
  const HttpRequestHead h = ParseRequestHead(absl::string_view(c.in).substr(0, head_end));
  c.head_only = h.head_only;
  if (h.status == 400) return AnswerError(c, 400, "bad request");
  if (h.status == 405) return AnswerError(c, 405, "only GET and HEAD");
  c.state = Conn::kRouted;
  c.deadline = Clock::now() + Chrono(o_.answer_timeout);
  c.in.clear();
  c.in.shrink_to_fit();
  core_.route_(id, HttpRequest{h.path, h.query, h.bearer_token, c.loopback});
}

void HttpServerCore::Loop::Answer(Conn& c, int status, const std::string& type,
                                  std::shared_ptr<const std::string> body) {
  c.state = Conn::kWriting;
  c.deadline = Clock::now() + Chrono(o_.write_timeout);
  c.head = WriteResponseHead(status, type, body ? body->size() : 0);
  c.body = c.head_only ? nullptr : std::move(body);
  c.sent = 0;
  c.wants = POLLOUT;
  c.in.clear();
  c.in.shrink_to_fit();
}

void HttpServerCore::Loop::AnswerError(Conn& c, int status, const char* why) {
  if (o_.json_errors) {
    Answer(c, status, "application/json", Body(absl::StrCat("{\"error\":\"", why, "\"}\n")));
  } else {
    Answer(c, status, kText, Body(absl::StrCat(why, "\n")));
  }
}

Io HttpServerCore::Loop::Write(Conn& c, size_t* wrote) {
  const size_t body_size = c.body ? c.body->size() : 0;
  const bool in_head = c.sent < c.head.size();
  const char* p = in_head ? c.head.data() + c.sent : c.body->data() + (c.sent - c.head.size());
  const size_t len = in_head ? c.head.size() - c.sent : body_size - (c.sent - c.head.size());
  if (c.ssl) {
    ERR_clear_error();
    const int n = SSL_write(c.ssl.get(), p, static_cast<int>(std::min<size_t>(len, INT_MAX)));
    if (n <= 0) return SslResult(c, n);
    *wrote = static_cast<size_t>(n);
    return Io::kProgress;
  }
  // Head and body in one call while both are left.
  iovec iov[2] = {{const_cast<char*>(p), len}, {nullptr, 0}};
  int count = 1;
  if (in_head && body_size > 0) iov[count++] = {const_cast<char*>(c.body->data()), body_size};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = count;
  const ssize_t n = ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) {
    *wrote = static_cast<size_t>(n);
    return Io::kProgress;
  }
  c.wants = POLLOUT;
  return TransientErrno(errno) ? Io::kAgain : Io::kFailed;
}

bool HttpServerCore::Loop::WriteSome(Conn& c) {
  while (c.sent < c.head.size() + (c.body ? c.body->size() : 0)) {
    size_t n = 0;
    const Io io = Write(c, &n);
    if (io == Io::kAgain) return true;
    if (io != Io::kProgress) return false;
    c.sent += n;
  }
  if (c.ssl) {
    SSL_shutdown(c.ssl.get());  // our close_notify, once; the peer's is not awaited
    ERR_clear_error();
  }
  return false;  // all sent: done
}

void HttpServerCore::Loop::ApplyAnswers() {
  std::vector<HttpServerCore::Answer> answers;
  {
    std::lock_guard<std::mutex> lock(core_.mu_);
    answers.swap(core_.answers_);
  }
  for (HttpServerCore::Answer& a : answers) {
    auto it = conns_.find(a.id);
    if (it == conns_.end() || it->second.state != Conn::kRouted) continue;  // gone meanwhile
    Answer(it->second, a.status, a.content_type, std::move(a.body));
    if (!WriteSome(it->second)) Close(it);
  }
}

void HttpServerCore::Loop::Expire() {
  const Clock::time_point now = Clock::now();
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    if (it->second.state == Conn::kHandshake) ++core_.tls_failures_;
    ++core_.timed_out_;
    it = Close(it);
  }
}

void HttpServerCore::Loop::Run() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  while (!core_.stop_) {
    fds.clear();
    ids.clear();
    const Clock::time_point now = Clock::now();
    const bool listening = now >= listen_paused_until_;
    fds.push_back({core_.wake_fd_.get(), POLLIN, 0});
    fds.push_back({listening ? core_.listen_fd_.get() : -1, POLLIN, 0});  // poll skips fd -1
    Clock::time_point next = listening ? now + std::chrono::seconds(1) : listen_paused_until_;
    for (auto& [id, c] : conns_) {
      const bool io = c.state != Conn::kRouted;
      fds.push_back({c.fd.get(), static_cast<short>(io ? c.wants : 0), 0});
      ids.push_back(id);
      next = std::min(next, c.deadline);
    }
    const int timeout_ms = static_cast<int>(std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1));
    if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
      LogError(o_.log_component, "{}: poll: {}", o_.flag, std::strerror(errno));
      absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    if (core_.stop_) break;
    if (fds[0].revents & POLLIN) {
      uint64_t v;
      (void)!::read(core_.wake_fd_.get(), &v, sizeof(v));
    }
    ApplyAnswers();  // given by other threads since the last pass
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto it = conns_.find(ids[i - 2]);
      if (it == conns_.end()) continue;  // evicted on this pass
      if (!Advance(it->first, it->second, fds[i].revents)) Close(it);
    }
    if (fds[1].revents & POLLIN) Accept();
    ApplyAnswers();  // given by the route on this pass
    Expire();
  }
  // Stop: every client sees its connection end now, whatever it was doing.
  for (auto& [id, c] : conns_) ::shutdown(c.fd.get(), SHUT_RDWR);
  conns_.clear();
}

HttpServerCore::HttpServerCore(HttpServerCoreOptions options, Route route)
    : options_(std::move(options)), route_(std::move(route)) {}

HttpServerCore::~HttpServerCore() { Stop(); }

absl::Status HttpServerCore::Start(const std::string& address) {
  auto listener = ListenTcp(address, options_.flag);
  if (!listener.ok()) return listener.status();
  wake_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (wake_fd_.get() < 0) return ErrnoError(errno, "eventfd", options_.flag);
  listen_fd_ = std::move(listener->fd);
  port_ = listener->port;
  const bool v6 = listener->host.find(':') != std::string::npos;
  bound_address_ = absl::StrCat(v6 ? "[" : "", listener->host, v6 ? "]" : "", ":", port_);
  stop_ = false;
  loop_ = std::thread([this] { Loop(*this).Run(); });
  return absl::OkStatus();
}

void HttpServerCore::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    Wake();
  }
  if (loop_.joinable()) loop_.join();
  listen_fd_.reset();
  // Under the lock: a late Respond() from a route's thread must not write to
  // a closed (or reused) descriptor.
  std::lock_guard<std::mutex> lock(mu_);
  wake_fd_.reset();
  answers_.clear();
}

void HttpServerCore::Wake() {
  if (wake_fd_.get() < 0) return;
  uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

void HttpServerCore::Respond(uint64_t id, int status, std::string content_type,
                             std::shared_ptr<const std::string> body) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  answers_.push_back(Answer{id, status, std::move(content_type), std::move(body)});
  Wake();
}

void HttpServerCore::Respond(uint64_t id, HttpAnswer answer) {
  Respond(id, answer.status, std::move(answer.content_type), Body(std::move(answer.body)));
}

HttpServerCore::Counters HttpServerCore::counters() const {
  return Counters{accepted_.load(), tls_failures_.load(), timed_out_.load(), evicted_.load(),
                  accept_pauses_.load()};
}

}  // namespace fabric
