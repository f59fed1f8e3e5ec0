// Where the doctor's peers come from: `file:PATH` (one host:port per line,
// '#' comments) or `dns:NAME[:PORT]` (every address of a headless Service; the
// port defaults to the local control port). Re-read every period, so a
// DaemonSet that grows or shrinks is followed without the API server.
#ifndef FABRIC_AGENT_DOCTOR_PEERS_H_
#define FABRIC_AGENT_DOCTOR_PEERS_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabric::doctor {

struct PeerAddress {
  std::string host;  // numeric address or name; IPv6 without brackets
  uint16_t port = 0;
  std::string ToString() const;  // "10.0.0.1:7000", "[fe80::1]:7000"
  bool operator==(const PeerAddress&) const = default;
  bool operator<(const PeerAddress& o) const { return ToString() < o.ToString(); }
};

// "10.0.0.1:7000", "[fe80::1]:7000", "node-a:7000". A missing port is an error.
absl::StatusOr<PeerAddress> ParsePeerAddress(absl::string_view text);
// Parses "0.0.0.0:7946", ":7946", "7946" (host may be empty).
absl::StatusOr<PeerAddress> ParseListenAddress(absl::string_view text);

struct PeerSpec {
  enum class Kind { kFile, kDns } kind = Kind::kFile;
  std::string target;  // path or DNS name
  uint16_t port = 0;   // dns: explicit port, 0 = the local control port
};
absl::StatusOr<PeerSpec> ParsePeerSpec(absl::string_view text);

// The content of a peers file: one address per line; blank lines and '#'
// comments skipped. A bad line is an error naming its number.
absl::StatusOr<std::vector<PeerAddress>> ParsePeerList(absl::string_view content);

// Resolves a spec to addresses (sorted, unique). `lookup` is getaddrinfo by
// default (numeric hosts); tests inject their own.
using DnsLookup = std::function<absl::StatusOr<std::vector<std::string>>(const std::string&)>;
absl::StatusOr<std::vector<PeerAddress>> ResolvePeers(const PeerSpec& spec, uint16_t default_port,
                                                      const DnsLookup& lookup = {});
absl::StatusOr<std::vector<std::string>> GetAddrInfo(const std::string& name);

// This network namespace's addresses (numeric), plus 127.0.0.1, ::1 and
// localhost; one getifaddrs call.
std::set<std::string> LocalAddresses();
// True if `host` is one of this network namespace's addresses (one
// getifaddrs call: ask LocalAddresses() once for many hosts).
bool IsLocalAddress(const std::string& host);

}  // namespace fabric::doctor

#endif  // FABRIC_AGENT_DOCTOR_PEERS_H_
