// Where the API server is and how to authenticate to it: in-cluster (the
// ServiceAccount's projected token and CA, KUBERNETES_SERVICE_HOST/PORT) or
// explicit (flags). The token file is re-read when it changes: projected
// tokens rotate about hourly.
#ifndef FABRIC_AGENT_KUBEAPI_KUBE_CONFIG_H_
#define FABRIC_AGENT_KUBEAPI_KUBE_CONFIG_H_

#include <sys/types.h>

#include <map>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fabric::kubeapi {

inline constexpr char kServiceAccountTokenFile[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/token";
inline constexpr char kServiceAccountCaFile[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

struct KubeConfig {
  std::string server;                     // "https://10.96.0.1:443" (no trailing slash)
  std::string token_file;                 // bearer token, re-read on change; empty: none
  std::string ca_file;                    // PEM bundle the server's certificate must chain to
  bool insecure_skip_tls_verify = false;  // tests only: no certificate check
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration request_timeout = absl::Seconds(30);  // every call but watches
  std::string user_agent = "fabric-agent";
};

struct InClusterPaths {
  std::string token_file = kServiceAccountTokenFile;
  std::string ca_file = kServiceAccountCaFile;
  // The process environment (at least KUBERNETES_SERVICE_HOST and
  // KUBERNETES_SERVICE_PORT); the daemon passes ProcessKubeEnv().
  std::map<std::string, std::string> env;
};

// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT from getenv.
std::map<std::string, std::string> ProcessKubeEnv();

// The config a Pod's ServiceAccount gives: https://HOST:PORT (IPv6 hosts
// bracketed), the token and CA files. Fails naming the variable or file that
// is missing or malformed; the token file must be readable now.
absl::StatusOr<KubeConfig> InClusterConfig(const InClusterPaths& paths);

// A config from flags: `server` is https://host[:port] (http:// only with
// `insecure`); `token_file` and `ca_file` may be empty (no token / the
// system's CAs). Checked the same way as InClusterConfig.
absl::StatusOr<KubeConfig> ExplicitConfig(const std::string& server, const std::string& token_file,
                                          const std::string& ca_file, bool insecure);

// A bearer token file, re-read when its identity (device, inode, size,
// mtime, ctime; the projected volume swaps a symlink) changes, and at least
// every `max_age` regardless. Thread-safe.
class TokenFile {
 public:
  explicit TokenFile(std::string path, absl::Duration max_age = absl::Minutes(1))
      : path_(std::move(path)), max_age_(max_age) {}

  // The current token (trimmed). The file's last good token is kept if a
  // re-read fails, so a rotation that races a read does not drop requests;
  // an error only while no token was ever read.
  absl::StatusOr<std::string> Token();
  // Forces the next Token() to read the file (after a 401).
  void Invalidate();
  const std::string& path() const { return path_; }

 private:
  struct Identity {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = -1;
    struct timespec mtime = {}, ctime = {};
    bool operator==(const Identity& o) const;
  };
  const std::string path_;
  const absl::Duration max_age_;
  std::mutex mu_;
  std::string token_;
  Identity identity_;
  absl::Time read_at_ = absl::InfinitePast();
};

// Reads and checks a token file: trimmed, non-empty, at most 16 KiB,
// printable ASCII only (it goes into an HTTP header).
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace fabric::kubeapi

#endif  // FABRIC_AGENT_KUBEAPI_KUBE_CONFIG_H_
