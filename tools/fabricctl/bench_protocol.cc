#include "tools/fabricctl/bench_protocol.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"

namespace fabric::fabricctl {
namespace {

constexpr uint32_t kMagic = 0x46434231;  // "FCB1"
constexpr uint32_t kMaxFrame = 1 << 20;

class Writer {
 public:
  explicit Writer(FrameType t) { out_.push_back(static_cast<char>(t)); }
  void U32(uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out_.push_back(static_cast<char>((v >> s) & 0xff));
  }
  void U64(uint64_t v) {
    U32(static_cast<uint32_t>(v >> 32));
    U32(static_cast<uint32_t>(v));
  }
  void Str(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const std::string& in, FrameType t) : in_(in) {
    if (in_.empty() || static_cast<uint8_t>(in_[0]) != static_cast<uint8_t>(t)) {
      ok_ = false;
    }
    pos_ = 1;
  }
  uint32_t U32() {
    if (!Need(4)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(in_[pos_++]);
    return v;
  }
  uint64_t U64() {
    uint64_t hi = U32();
    return (hi << 32) | U32();
  }
  std::string Str() {
    uint32_t n = U32();
    if (!Need(n)) return "";
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  // A count of items that each take at least `min_item` bytes.
  uint32_t Count(size_t min_item) {
    uint32_t n = U32();
    if (n > (in_.size() - pos_) / min_item) ok_ = false;
    return ok_ ? n : 0;
  }
  absl::Status Finish(const char* what) const {
    if (!ok_ || pos_ != in_.size()) {
      return absl::DataLossError(absl::StrCat("bench control channel: malformed ", what));
    }
    return absl::OkStatus();
  }

 private:
  bool Need(size_t n) {
    if (!ok_ || in_.size() - pos_ < n) ok_ = false;
    return ok_;
  }
  const std::string& in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

std::chrono::steady_clock::time_point DeadlineIn(double s) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(s));
}

absl::Status WaitFd(int fd, short events, std::chrono::steady_clock::time_point deadline,
                    const char* what) {
  while (true) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, RemainingMs(deadline));
    if (r > 0) return absl::OkStatus();
    if (r == 0) return absl::DeadlineExceededError(absl::StrCat("timed out waiting to ", what));
    if (errno != EINTR) return ErrnoError(errno, "poll", what);
  }
}

absl::Status RecvAll(int fd, char* buf, size_t n, std::chrono::steady_clock::time_point deadline) {
  while (n > 0) {
    if (auto s = WaitFd(fd, POLLIN, deadline, "receive from the bench peer"); !s.ok()) return s;
    ssize_t r = ::recv(fd, buf, n, 0);
    if (r == 0) return absl::UnavailableError("bench peer closed the control connection");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError(errno, "recv", "bench control connection");
    }
    buf += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeHello(const Hello& m) {
  Writer w(FrameType::kHello);
  w.U32(kMagic);
  w.Str(m.provider);
  w.U64(m.size);
  w.U32(m.batch);
  w.U32(m.threads);
  w.Str(m.client_provider);
  w.Str(m.client_domain);
  w.U32(static_cast<uint32_t>(m.endpoint_names.size()));
  for (const auto& n : m.endpoint_names) w.Str(n);
  return w.Take();
}

absl::StatusOr<Hello> DecodeHello(const std::string& frame) {
  Reader r(frame, FrameType::kHello);
  Hello m;
  if (r.U32() != kMagic) return absl::DataLossError("bench control channel: not a fabricctl peer");
  m.provider = r.Str();
  m.size = r.U64();
  m.batch = r.U32();
  m.threads = r.U32();
  m.client_provider = r.Str();
  m.client_domain = r.Str();
  uint32_t n = r.Count(4);
  for (uint32_t i = 0; i < n; ++i) m.endpoint_names.push_back(r.Str());
  if (auto s = r.Finish("hello"); !s.ok()) return s;
  return m;
}

std::string EncodeWelcome(const Welcome& m) {
  Writer w(FrameType::kWelcome);
  w.U32(m.status);
  w.Str(m.message);
  w.Str(m.provider);
  w.Str(m.fabric);
  w.Str(m.domain);
  w.U32(static_cast<uint32_t>(m.buffers.size()));
  for (const auto& b : m.buffers) {
    w.Str(b.endpoint_name);
    w.U64(b.addr);
    w.U64(b.key);
  }
  return w.Take();
}

absl::StatusOr<Welcome> DecodeWelcome(const std::string& frame) {
  Reader r(frame, FrameType::kWelcome);
  Welcome m;
  m.status = r.U32();
  m.message = r.Str();
  m.provider = r.Str();
  m.fabric = r.Str();
  m.domain = r.Str();
  uint32_t n = r.Count(20);
  for (uint32_t i = 0; i < n; ++i) {
    RemoteBuffer b;
    b.endpoint_name = r.Str();
    b.addr = r.U64();
    b.key = r.U64();
    m.buffers.push_back(std::move(b));
  }
  if (auto s = r.Finish("welcome"); !s.ok()) return s;
  return m;
}

std::string EncodeEmpty(FrameType t) { return Writer(t).Take(); }

absl::Status ExpectEmpty(const std::string& frame, FrameType t) {
  return Reader(frame, t).Finish(t == FrameType::kDone ? "done" : "bye");
}

ScopedFd& ScopedFd::operator=(ScopedFd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<ScopedFd> ListenTcp(const HostPort& at) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  std::string port = std::to_string(at.port);
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(at.host.empty() ? nullptr : at.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("resolve ", at.host, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError("no address to listen on");
  // With no host prefer IPv6 "::" (dual stack) and fall back to IPv4.
  for (int pass = 0; pass < 2; ++pass) {
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      if (at.host.empty() && (pass == 0) != (a->ai_family == AF_INET6)) continue;
      if (!at.host.empty() && pass == 1) continue;
      ScopedFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (fd.get() < 0) {
        last = ErrnoError(errno, "socket", at.host);
        continue;
      }
      int one = 1;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      if (a->ai_family == AF_INET6) {
        int zero = 0;
        ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
      }
      if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), 4) != 0) {
        last = ErrnoError(errno, "bind/listen", absl::StrCat(at.host, ":", at.port));
        continue;
      }
      ::freeaddrinfo(res);
      return fd;
    }
  }
  ::freeaddrinfo(res);
  return last;
}

absl::StatusOr<uint16_t> BoundPort(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return ErrnoError(errno, "getsockname", "bench listener");
  }
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
}

absl::StatusOr<ScopedFd> AcceptOne(int listen_fd, double timeout_s) {
  auto deadline = DeadlineIn(timeout_s);
  if (auto s = WaitFd(listen_fd, POLLIN, deadline, "accept a bench client"); !s.ok()) return s;
  ScopedFd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, "accept", "bench listener");
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

absl::StatusOr<ScopedFd> ConnectTcp(const HostPort& to, double timeout_s) {
  auto deadline = DeadlineIn(timeout_s);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  std::string port = std::to_string(to.port);
  std::string where = absl::StrCat(to.host, ":", to.port);
  absl::Status last = absl::UnavailableError(absl::StrCat("cannot connect to ", where));
  // Retry until the deadline: the peer may still be starting.
  while (true) {
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(to.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
      return absl::InvalidArgumentError(absl::StrCat("resolve ", to.host, ": ", gai_strerror(rc)));
    }
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      ScopedFd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (fd.get() < 0) continue;
      if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
        ::freeaddrinfo(res);
        int one = 1;
        ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        return fd;
      }
      last = ErrnoError(errno, "connect", where);
    }
    ::freeaddrinfo(res);
    if (RemainingMs(deadline) == 0) return last;
    ::usleep(100 * 1000);
  }
}

absl::StatusOr<std::string> LocalAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
    return ErrnoError(errno, "getsockname", "bench control connection");
  }
  char host[NI_MAXHOST];
  int rc = ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0,
                         NI_NUMERICHOST);
  if (rc != 0) return absl::InternalError(absl::StrCat("getnameinfo: ", gai_strerror(rc)));
  std::string s = host;
  // "::ffff:127.0.0.1" (a v4 client on a dual-stack listener) -> "127.0.0.1".
  if (s.rfind("::ffff:", 0) == 0 && s.find('.') != std::string::npos) s = s.substr(7);
  return s;
}

absl::Status SendFrame(int fd, const std::string& payload) {
  std::string buf;
  uint32_t n = static_cast<uint32_t>(payload.size());
  for (int s = 24; s >= 0; s -= 8) buf.push_back(static_cast<char>((n >> s) & 0xff));
  buf += payload;
  size_t off = 0;
  while (off < buf.size()) {
    ssize_t w = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "send", "bench control connection");
    }
    off += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RecvFrame(int fd, double timeout_s) {
  auto deadline = DeadlineIn(timeout_s);
  unsigned char len[4];
  if (auto s = RecvAll(fd, reinterpret_cast<char*>(len), 4, deadline); !s.ok()) return s;
  uint32_t n = (uint32_t{len[0]} << 24) | (uint32_t{len[1]} << 16) | (uint32_t{len[2]} << 8) |
               uint32_t{len[3]};
  if (n == 0 || n > kMaxFrame) {
    return absl::DataLossError("bench control channel: bad frame length");
  }
  std::string payload(n, '\0');
  if (auto s = RecvAll(fd, payload.data(), n, deadline); !s.ok()) return s;
  return payload;
}

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

}  // namespace fabric::fabricctl
