#include "agent/doctor/peers.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/base/file_util.h"

namespace fabric::doctor {
namespace {

absl::StatusOr<PeerAddress> SplitHostPort(absl::string_view text, bool allow_no_host) {
  text = absl::StripAsciiWhitespace(text);
  PeerAddress out;
  absl::string_view port_text;
  if (absl::ConsumePrefix(&text, "[")) {
    size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not [v6addr]:port"));
    }
    out.host = std::string(text.substr(0, close));
    port_text = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      if (!allow_no_host) {
        return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no :port"));
      }
      port_text = text;
    } else {
      out.host = std::string(text.substr(0, colon));
      if (out.host.find(':') != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", text, "': write IPv6 addresses as [addr]:port"));
      }
      port_text = text.substr(colon + 1);
    }
  }
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < (allow_no_host ? 0 : 1) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "': bad port"));
  }
  if (out.host.empty() && !allow_no_host) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' has no host"));
  }
  out.port = static_cast<uint16_t>(port);
  return out;
}

}  // namespace

std::string PeerAddress::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<PeerAddress> ParsePeerAddress(absl::string_view text) {
  return SplitHostPort(text, false);
}
absl::StatusOr<PeerAddress> ParseListenAddress(absl::string_view text) {
  return SplitHostPort(text, true);
}

absl::StatusOr<PeerSpec> ParsePeerSpec(absl::string_view text) {
  PeerSpec spec;
  if (absl::ConsumePrefix(&text, "file:")) {
    spec.kind = PeerSpec::Kind::kFile;
    if (text.empty()) return absl::InvalidArgumentError("--doctor-peers file: needs a path");
    spec.target = std::string(text);
    return spec;
  }
  if (absl::ConsumePrefix(&text, "dns:")) {
    spec.kind = PeerSpec::Kind::kDns;
    size_t colon = text.rfind(':');
    if (colon != absl::string_view::npos) {
      int port = 0;
      if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port <= 0 || port > 65535) {
        return absl::InvalidArgumentError(absl::StrCat("--doctor-peers: bad port in '", text, "'"));
      }
      spec.port = static_cast<uint16_t>(port);
      text = text.substr(0, colon);
    }
    if (text.empty()) return absl::InvalidArgumentError("--doctor-peers dns: needs a name");
    spec.target = std::string(text);
    return spec;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--doctor-peers: '", text, "' is neither file:PATH nor dns:NAME"));
}

absl::StatusOr<std::vector<PeerAddress>> ParsePeerList(absl::string_view content) {
  std::vector<PeerAddress> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    ++line_no;
    size_t hash = line.find('#');
    if (hash != absl::string_view::npos) line = line.substr(0, hash);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    auto a = ParsePeerAddress(line);
    if (!a.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("peers line ", line_no, ": ", a.status().message()));
    }
    out.push_back(*a);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> GetAddrInfo(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(name.c_str(), nullptr, &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("getaddrinfo(", name, "): ", gai_strerror(rc)));
  }
  std::vector<std::string> out;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    const void* src =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, src, buf, sizeof(buf)) != nullptr) out.emplace_back(buf);
  }
  freeaddrinfo(res);
  return out;
}

absl::StatusOr<std::vector<PeerAddress>> ResolvePeers(const PeerSpec& spec, uint16_t default_port,
                                                      const DnsLookup& lookup) {
  std::vector<PeerAddress> out;
  if (spec.kind == PeerSpec::Kind::kFile) {
    auto content = ReadFile(spec.target);
    if (!content.ok()) return content.status();
    auto list = ParsePeerList(*content);
    if (!list.ok()) return list.status();
    out = *std::move(list);
  } else {
    auto hosts = lookup ? lookup(spec.target) : GetAddrInfo(spec.target);
    if (!hosts.ok()) return hosts.status();
    for (const std::string& h : *hosts) {
      out.push_back({h, spec.port != 0 ? spec.port : default_port});
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::set<std::string> LocalAddresses() {
  std::set<std::string> out = {"127.0.0.1", "::1", "localhost"};
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof(buf));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, buf,
                sizeof(buf));
    } else {
      continue;
    }
    out.insert(buf);
  }
  freeifaddrs(list);
  return out;
}

bool IsLocalAddress(const std::string& host) { return LocalAddresses().count(host) > 0; }

}  // namespace fabric::doctor
