#include "agent/doctor/control.h"

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
#include <cstring>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"

namespace fabric::doctor {
namespace {

using Clock = std::chrono::steady_clock;

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

// Resolves numeric or named host:port to a sockaddr (first result).
bool Resolve(const PeerAddress& a, sockaddr_storage* out, socklen_t* len, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string port = std::to_string(a.port);
  if (getaddrinfo(a.host.empty() ? nullptr : a.host.c_str(), port.c_str(), &hints, &res) != 0) {
    return false;
  }
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return true;
}

int RemainingMs(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return ms < 0 ? 0 : static_cast<int>(ms);
}

// Whole frame in `buf`? Returns payload length or -1 (need more); -2 bad.
long FrameReady(const std::string& buf) {
  if (buf.size() < 4) return -1;
  const auto* p = reinterpret_cast<const uint8_t*>(buf.data());
  uint32_t n = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
  if (n > kMaxControlFrame) return -2;
  if (buf.size() < 4 + n) return -1;
  return static_cast<long>(n);
}

// The numeric host of a connection's peer ("10.0.0.1", "fe80::1"); "" if unknown.
std::string SourceHost(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&a)->sin_addr, buf, sizeof(buf));
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      inet_ntop(AF_INET, &in6->sin6_addr.s6_addr[12], buf, sizeof(buf));
    } else {
      inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    }
  }
  return buf;
}

}  // namespace

ControlServer::ControlServer(std::function<NodeInfo()> answer, OnQuery on_query,
                             size_t max_connections, absl::Duration per_connection)
    : answer_(std::move(answer)),
      on_query_(std::move(on_query)),
      max_connections_(max_connections),
      per_connection_(per_connection) {}

ControlServer::~ControlServer() { Stop(); }

absl::Status ControlServer::Start(const PeerAddress& listen) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  PeerAddress l = listen;
  if (l.host.empty()) l.host = "0.0.0.0";
  if (!Resolve(l, &addr, &len, true)) {
    return absl::InvalidArgumentError(absl::StrCat("--doctor-address: cannot resolve ", l.host));
  }
  int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd, 128) != 0) {
    int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("doctor control: cannot listen on ", l.ToString(), ": ", std::strerror(e)));
  }
  SetNonBlocking(fd);
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  listen_fd_ = fd;
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return absl::InternalError("pipe2");
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void ControlServer::Stop() {
  stop_ = true;
  if (wake_[1] >= 0) (void)!write(wake_[1], "x", 1);
  if (thread_.joinable()) thread_.join();
  for (int* fd : {&listen_fd_, &wake_[0], &wake_[1]}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

std::map<std::string, uint64_t> ControlServer::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void ControlServer::Count(const std::string& event) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_[event]++;
}

void ControlServer::Run() {
  struct Conn {
    int fd;
    Clock::time_point deadline;
    std::string source;
    std::string in;
    std::string out;  // the answer, written whole (in as many writes as it takes) or not at all
    size_t sent = 0;
  };
  std::vector<Conn> conns;
  const auto budget = absl::ToChronoNanoseconds(per_connection_);
  while (!stop_.load()) {
    std::vector<pollfd> fds;
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back(
        {listen_fd_, static_cast<short>(conns.size() < max_connections_ ? POLLIN : 0), 0});
    for (const Conn& c : conns) {
      fds.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
    }
    int timeout = 1000;
    for (const Conn& c : conns) timeout = std::min(timeout, RemainingMs(c.deadline) + 1);
    if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) break;
    if (fds[0].revents) break;
    std::vector<bool> close_it(conns.size(), false);
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      if (fds[i + 2].revents && !c.out.empty()) {
        ssize_t n = write(c.fd, c.out.data() + c.sent, c.out.size() - c.sent);
        if (n > 0) c.sent += static_cast<size_t>(n);
        if (n < 0 && errno != EAGAIN && errno != EINTR) {
          Count("control_answer_failed");
          close_it[i] = true;
        } else if (c.sent == c.out.size()) {
          close_it[i] = true;
        }
        continue;
      }
      if (fds[i + 2].revents) {
        char buf[4096];
        ssize_t n = read(c.fd, buf, sizeof(buf));
        if (n <= 0) {
          if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            if (!c.in.empty()) Count("garbage_control");  // a partial frame, then gone
            close_it[i] = true;
          }
          continue;
        }
        c.in.append(buf, static_cast<size_t>(n));
        long len = FrameReady(c.in);
        if (len == -2 || c.in.size() > 4 + kMaxControlFrame) {
          Count("garbage_control");
          close_it[i] = true;
          continue;
        }
        if (len < 0) continue;
        auto m = DecodeControl(c.in.substr(4, static_cast<size_t>(len)));
        ControlMessage reply;
        if (!m.ok() && absl::IsFailedPrecondition(m.status())) {
          Count("control_version_mismatch");
          reply.type = ControlType::kError;
          reply.error = std::string(m.status().message()).substr(0, 200);
        } else if (!m.ok() || m->type != ControlType::kQuery) {
          // A name that is not clean text has its own event: it is what a
          // hostile or broken peer sends, not line noise.
          Count(!m.ok() && ControlRejectReason(m.status()) == "control_bad_name"
                    ? "control_bad_name"
                    : "garbage_control");
          close_it[i] = true;
          continue;
        } else {
          Count("control_queries_served");
          on_query_(c.source, m->info);
          reply.type = ControlType::kInfo;
          reply.info = answer_();
        }
        auto payload = EncodeControl(reply);
        if (!payload.ok()) {
          Count("control_answer_failed");
          close_it[i] = true;
          continue;
        }
        // Written on POLLOUT until whole or the connection's deadline: a
        // large answer (up to 64 KiB) need not fit the socket buffer.
        c.out = Frame(*payload);
        c.in.clear();
      } else if (Clock::now() > c.deadline) {
        Count(!c.out.empty() ? "control_answer_failed"
              : c.in.empty() ? "control_idle_closed"
                             : "garbage_control");
        close_it[i] = true;
      }
    }
    std::vector<Conn> keep;
    for (size_t i = 0; i < conns.size(); ++i) {
      if (close_it[i]) {
        close(conns[i].fd);
      } else {
        keep.push_back(std::move(conns[i]));
      }
    }
    conns.swap(keep);
    if (fds[1].revents & POLLIN) {
      while (conns.size() < max_connections_) {
        sockaddr_storage from{};
        socklen_t from_len = sizeof(from);
        int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        conns.push_back({fd, Clock::now() + budget, SourceHost(from), {}, {}, 0});
      }
    }
  }
  for (Conn& c : conns) close(c.fd);
}

std::vector<QueryResult> QueryAll(const std::vector<PeerAddress>& peers, const NodeInfo& query,
                                  absl::Duration timeout) {
  std::vector<QueryResult> results(peers.size());
  ControlMessage q;
  q.type = ControlType::kQuery;
  q.info = query;
  auto payload = EncodeControl(q);
  if (!payload.ok()) {
    for (auto& r : results)
      r = {false, {}, "control_error", std::string(payload.status().message())};
    return results;
  }
  const std::string frame = Frame(*payload);
  struct Op {
    int fd = -1;
    bool connected = false;
    size_t sent = 0;
    std::string in;
    bool done = false;
  };
  std::vector<Op> ops(peers.size());
  const Clock::time_point deadline = Clock::now() + absl::ToChronoNanoseconds(timeout);
  auto fail = [&](size_t i, const std::string& reason, const std::string& error) {
    results[i] = {false, {}, reason, error};
    ops[i].done = true;
    if (ops[i].fd >= 0) close(ops[i].fd);
    ops[i].fd = -1;
  };
  for (size_t i = 0; i < peers.size(); ++i) {
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (!Resolve(peers[i], &addr, &len, false)) {
      fail(i, "control_refused", "cannot resolve " + peers[i].host);
      continue;
    }
    int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      fail(i, "control_error", std::strerror(errno));
      continue;
    }
    ops[i].fd = fd;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS) {
      fail(i, "control_refused", absl::StrCat("connect: ", std::strerror(errno)));
    }
  }
  while (true) {
    std::vector<pollfd> fds;
    std::vector<size_t> idx;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].done) continue;
      short events = ops[i].sent < frame.size() ? POLLOUT : POLLIN;
      fds.push_back({ops[i].fd, events, 0});
      idx.push_back(i);
    }
    if (fds.empty()) break;
    int ms = RemainingMs(deadline);
    if (ms == 0) {
      for (size_t i : idx) {
        fail(i, "control_timeout",
             ops[i].connected ? "no answer on the control channel" : "connect timed out");
      }
      break;
    }
    if (poll(fds.data(), fds.size(), ms) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      size_t i = idx[k];
      Op& op = ops[i];
      if (fds[k].revents == 0) continue;
      if (!op.connected) {
        int err = 0;
        socklen_t elen = sizeof(err);
        getsockopt(op.fd, SOL_SOCKET, SO_ERROR, &err, &elen);
        if (err != 0) {
          fail(i, "control_refused", absl::StrCat("connect: ", std::strerror(err)));
          continue;
        }
        op.connected = true;
      }
      if (op.sent < frame.size()) {
        ssize_t n = write(op.fd, frame.data() + op.sent, frame.size() - op.sent);
        if (n < 0 && errno != EAGAIN) {
          fail(i, "control_refused", absl::StrCat("write: ", std::strerror(errno)));
        } else if (n > 0) {
          op.sent += static_cast<size_t>(n);
        }
        continue;
      }
      char buf[4096];
      ssize_t n = read(op.fd, buf, sizeof(buf));
      if (n < 0 && errno == EAGAIN) continue;
      if (n <= 0) {
        fail(i, "control_refused", "connection closed before an answer");
        continue;
      }
      op.in.append(buf, static_cast<size_t>(n));
      long len = FrameReady(op.in);
      if (len == -2) {
        fail(i, "control_garbage", "oversized answer");
        continue;
      }
      if (len < 0) continue;
      auto m = DecodeControl(op.in.substr(4, static_cast<size_t>(len)));
      if (!m.ok()) {
        fail(i, ControlRejectReason(m.status()), std::string(m.status().message()));
      } else if (m->type == ControlType::kError) {
        fail(i, "control_version", "peer refused: " + m->error);
      } else if (m->type != ControlType::kInfo) {
        fail(i, "control_garbage", "unexpected message type");
      } else {
        results[i] = {true, m->info, "", ""};
        op.done = true;
        close(op.fd);
        op.fd = -1;
      }
    }
  }
  for (Op& op : ops) {
    if (op.fd >= 0) close(op.fd);
  }
  return results;
}

}  // namespace fabric::doctor
