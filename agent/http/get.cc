#include "agent/http/get.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace fabric {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status Unavailable(const std::string& base, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("cannot reach the agent at ", base, ": ", what));
}

// Waits for `events` on fd until `deadline`; false on timeout or error.
bool Wait(int fd, short events, absl::Time deadline) {
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(ms));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& base, const std::string& path,
                                     absl::Duration timeout) {
  absl::string_view hp = base;
  absl::ConsumePrefix(&hp, "http://");
  absl::ConsumeSuffix(&hp, "/");
  const size_t colon = hp.rfind(':');
  if (colon == absl::string_view::npos || colon + 1 == hp.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent address '", base, "': expected host:port or http://host:port"));
  }
  std::string host(hp.substr(0, colon));
  const std::string port(hp.substr(colon + 1));
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "127.0.0.1";

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Unavailable(base, ::gai_strerror(rc));
  }
  const absl::Time deadline = absl::Now() + timeout;
  std::string error = "no address";
  int connected = -1;
  for (addrinfo* ai = res; ai != nullptr && connected < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    int so_error = 0;
    socklen_t len = sizeof(so_error);
    if (!Wait(fd, POLLOUT, deadline)) {
      error = "connect timed out";
    } else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error != 0) {
      error = std::strerror(so_error != 0 ? so_error : errno);
    } else {
      connected = fd;
      break;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (connected < 0) return Unavailable(base, error);
  Fd fd(connected);

  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host, "\r\nConnection: close\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    if (!Wait(fd.get(), POLLOUT, deadline)) return Unavailable(base, "send timed out");
    ssize_t n = ::send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return Unavailable(base, std::strerror(errno));
    if (n > 0) sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buf[65536];
  for (;;) {
    if (!Wait(fd.get(), POLLIN, deadline)) return Unavailable(base, "no answer in time");
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return Unavailable(base, std::strerror(errno));
    }
    raw.append(buf, static_cast<size_t>(n));
  }
  // "HTTP/1.x NNN ...\r\n...\r\n\r\nbody"
  HttpResponse out;
  const size_t head_end = raw.find("\r\n\r\n");
  if (!absl::StartsWith(raw, "HTTP/1.") || raw.size() < 12 || head_end == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(raw).substr(9, 3), &out.status)) {
    return absl::DataLossError(absl::StrCat("agent at ", base, ": not an HTTP response"));
  }
  out.body = raw.substr(head_end + 4);
  return out;
}

}  // namespace fabric
