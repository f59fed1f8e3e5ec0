// OpenSSL (Debian's libssl3) for the agent's own TLS: RAII owners for every
// handle, and the one translation of OpenSSL's error queue to absl::Status.
// Linked statically into the FABRIC_STATIC agent (cmake/fabric-static-link.sh),
// so an agent that serves no TLS maps no OpenSSL library.
#ifndef FABRIC_AGENT_HTTP_OPENSSL_H_
#define FABRIC_AGENT_HTTP_OPENSSL_H_

#include <openssl/ssl.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabric::podsapi {

struct SslFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
  void operator()(SSL* s) const { SSL_free(s); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslFree>;
using SslPtr = std::unique_ptr<SSL, SslFree>;

// A file descriptor, closed once.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// `what`: and the errors on this thread's OpenSSL queue (which it empties).
absl::Status OpenSslError(absl::string_view what,
                          absl::StatusCode code = absl::StatusCode::kInternal);

// A server context from PEM files (TLS 1.2 at least): the certificate chain
// and its private key, checked to match. FailedPrecondition naming the file.
absl::StatusOr<SslCtxPtr> ServerContext(const std::string& cert_file, const std::string& key_file);

// A client context that verifies the peer against `ca_file` (empty: the
// system's CAs), or does not verify at all with `insecure`.
absl::StatusOr<SslCtxPtr> ClientContext(const std::string& ca_file, bool insecure);

// Connects a TCP socket to host:port within `timeout_ms` (blocking after).
absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, int port, int timeout_ms);

}  // namespace fabric::podsapi

#endif  // FABRIC_AGENT_HTTP_OPENSSL_H_
