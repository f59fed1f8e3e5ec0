#include "agent/kubeapi/kube_config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/mono_clock.h"
#include "agent/base/utf8.h"

namespace fabric::kubeapi {
namespace {

constexpr size_t kMaxTokenBytes = 16 << 10;

// A host as it may appear in a URL authority: letters, digits, '.', '-',
// ':' (IPv6). Anything else (a '/', '@', space) would change the URL.
absl::Status CheckHost(absl::string_view what, absl::string_view host) {
  if (host.empty() || host.size() > 253) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", EscapeBytes(host), "\" must be 1-253 bytes"));
  }
  for (char c : host) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != ':') {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " \"", EscapeBytes(host), "\" is not a host name or IP address"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPort(absl::string_view what, absl::string_view port) {
  int n = 0;
  bool digits = !port.empty() && port.size() <= 5;
  for (char c : port) digits = digits && absl::ascii_isdigit(static_cast<unsigned char>(c));
  if (!digits || !absl::SimpleAtoi(port, &n) || n < 1 || n > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", EscapeBytes(port), "\" is not a port (1-65535)"));
  }
  return absl::OkStatus();
}

absl::Status CheckReadable(absl::string_view what, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return ErrnoError(errno, absl::StrCat("stat ", what), path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", path, " is not a regular file"));
  }
  return absl::OkStatus();
}

}  // namespace

std::map<std::string, std::string> ProcessKubeEnv() {
  std::map<std::string, std::string> env;
  for (const char* name : {"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}) {
    if (const char* v = std::getenv(name)) env[name] = v;
  }
  return env;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto content = ReadFile(path);
  if (!content.ok()) {
    return absl::Status(content.status().code(),
                        absl::StrCat("ServiceAccount token: ", content.status().message()));
  }
  if (content->size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is ", content->size(),
                                                   " bytes, more than ", kMaxTokenBytes));
  }
  std::string token(absl::StripAsciiWhitespace(*content));
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  for (char c : token) {
    if (c < 0x21 || c > 0x7E) {
      // Never quote the token: it is a credential.
      return absl::InvalidArgumentError(absl::StrCat(
          "token file ", path, " holds a byte outside printable ASCII (not a bearer token)"));
    }
  }
  return token;
}

absl::StatusOr<KubeConfig> InClusterConfig(const InClusterPaths& paths) {
  auto get = [&](const char* name) -> std::string {
    auto it = paths.env.find(name);
    return it == paths.env.end() ? "" : it->second;
  };
  const std::string host = get("KUBERNETES_SERVICE_HOST");
  const std::string port = get("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return absl::FailedPreconditionError(
        "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set");
  }
  auto st = CheckHost("KUBERNETES_SERVICE_HOST", host);
  if (!st.ok()) return st;
  st = CheckPort("KUBERNETES_SERVICE_PORT", port);
  if (!st.ok()) return st;
  auto token = ReadTokenFile(paths.token_file);
  if (!token.ok()) return token.status();
  st = CheckReadable("CA file", paths.ca_file);
  if (!st.ok()) return st;
  KubeConfig config;
  const bool ipv6 = host.find(':') != std::string::npos;
  config.server = absl::StrCat("https://", ipv6 ? "[" : "", host, ipv6 ? "]" : "", ":", port);
  config.token_file = paths.token_file;
  config.ca_file = paths.ca_file;
  return config;
}

absl::StatusOr<KubeConfig> ExplicitConfig(const std::string& server, const std::string& token_file,
                                          const std::string& ca_file, bool insecure) {
  absl::string_view rest = server;
  if (rest.rfind("https://", 0) == 0) {
    rest.remove_prefix(8);
  } else if (rest.rfind("http://", 0) == 0 && insecure) {
    rest.remove_prefix(7);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("API server URL \"", EscapeBytes(server),
                     "\" must start with https:// (http:// only when insecure)"));
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  absl::string_view host = rest, port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("API server URL \"", EscapeBytes(server), "\": unclosed '['"));
    }
    host = rest.substr(1, close - 1);
    absl::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return absl::InvalidArgumentError(
            absl::StrCat("API server URL \"", EscapeBytes(server), "\": junk after ']'"));
      }
      port = after.substr(1);
    }
  } else if (const size_t colon = rest.rfind(':'); colon != absl::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  auto st = CheckHost("API server host", host);
  if (!st.ok()) return st;
  if (!port.empty() || (!rest.empty() && rest.back() == ':')) {
    st = CheckPort("API server port", port);
    if (!st.ok()) return st;
  }
  if (!token_file.empty()) {
    auto token = ReadTokenFile(token_file);
    if (!token.ok()) return token.status();
  }
  if (!ca_file.empty()) {
    st = CheckReadable("CA file", ca_file);
    if (!st.ok()) return st;
  }
  KubeConfig config;
  // The URL without trailing slashes (request paths start with one).
  config.server = std::string(server.data(), rest.data() + rest.size() - server.data());
  config.token_file = token_file;
  config.ca_file = ca_file;
  config.insecure_skip_tls_verify = insecure;
  return config;
}

bool TokenFile::Identity::operator==(const Identity& o) const {
  return dev == o.dev && ino == o.ino && size == o.size && mtime.tv_sec == o.mtime.tv_sec &&
         mtime.tv_nsec == o.mtime.tv_nsec && ctime.tv_sec == o.ctime.tv_sec &&
         ctime.tv_nsec == o.ctime.tv_nsec;
}

absl::StatusOr<std::string> TokenFile::Token() {
  std::lock_guard<std::mutex> lock(mu_);
  Identity now_id;
  struct stat st;
  if (stat(path_.c_str(), &st) == 0) {
    now_id = {st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
  }
  const absl::Time now = MonotonicNow();
  if (!token_.empty() && now_id == identity_ && now - read_at_ < max_age_) return token_;
  auto token = ReadTokenFile(path_);
  if (!token.ok()) {
    if (!token_.empty()) return token_;  // keep the last good one (rotation in flight)
    return token.status();
  }
  token_ = *std::move(token);
  identity_ = now_id;
  read_at_ = now;
  return token_;
}

void TokenFile::Invalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  read_at_ = absl::InfinitePast();
}

}  // namespace fabric::kubeapi
