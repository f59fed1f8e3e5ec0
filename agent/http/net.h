// Sockets for the HTTP layer: a listener on "host:port",
// and what the server needs to know of a peer's address.
#ifndef FABRIC_AGENT_HTTP_NET_H_
#define FABRIC_AGENT_HTTP_NET_H_

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/base/unique_fd.h"

namespace fabric {

struct Listener {
  UniqueFd fd;  // non-blocking
  std::string host;
  int port = 0;  // the bound port (the one picked for port 0)
};

// Listens on `address` ("host:port", "[v6]:port", ":port" for every address;
// port 0 picks a free one). kInvalidArgument naming `flag` for an address
// that is not host:port or does not resolve; kUnavailable when it cannot bind.
absl::StatusOr<Listener> ListenTcp(const std::string& address, absl::string_view flag);

// The peer's IP address as bytes (an IPv4-mapped IPv6 address as its IPv4
// one), to count connections per client.
std::string PeerKey(const sockaddr_storage& peer);

// The peer is on this host's loopback (or a unix socket).
bool IsLoopback(const sockaddr_storage& peer);

// A non-blocking socket call that failed with `e` may be tried again later.
inline bool TransientErrno(int e) { return e == EAGAIN || e == EWOULDBLOCK || e == EINTR; }

}  // namespace fabric

#endif  // FABRIC_AGENT_HTTP_NET_H_
