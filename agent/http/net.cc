#include "agent/http/net.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fabric {

absl::StatusOr<Listener> ListenTcp(const std::string& address, absl::string_view flag) {
  const size_t colon = address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": '", address, "' is not host:port"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &res); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot resolve '", host, "': ", ::gai_strerror(rc)));
  }
  absl::Status status = absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  Listener out;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) continue;
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), 128) != 0) {
      status = absl::UnavailableError(
          absl::StrCat("cannot listen on ", address, ": ", std::strerror(errno)));
      continue;
    }
    out.fd = std::move(fd);
    break;
  }
  ::freeaddrinfo(res);
  if (out.fd.get() < 0) return status;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(out.fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  out.port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(bound).sin6_port
                                        : reinterpret_cast<const sockaddr_in&>(bound).sin_port);
  out.host = host;
  return out;
}

std::string PeerKey(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const in_addr& v4 = reinterpret_cast<const sockaddr_in&>(a).sin_addr;
    return std::string(reinterpret_cast<const char*>(&v4), sizeof(v4));
  }
  if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&v6))
      return std::string(reinterpret_cast<const char*>(v6.s6_addr) + 12, 4);
    return std::string(reinterpret_cast<const char*>(v6.s6_addr), 16);
  }
  return "local";
}

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

}  // namespace fabric
