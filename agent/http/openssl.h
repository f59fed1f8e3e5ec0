// OpenSSL (Debian's libssl3) for the agent's TLS, server and client: RAII
// owners for every handle, the one translation of OpenSSL's error queue to
// absl::Status, and a server certificate re-read when its files change.
// Linked statically into the FABRIC_STATIC agent (cmake/fabric-static-link.sh).
#ifndef FABRIC_AGENT_HTTP_OPENSSL_H_
#define FABRIC_AGENT_HTTP_OPENSSL_H_

#include <openssl/ssl.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace fabric {

struct SslFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
  void operator()(SSL* s) const { SSL_free(s); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslFree>;
using SslPtr = std::unique_ptr<SSL, SslFree>;

// `what`: and the errors on this thread's OpenSSL queue (which it empties).
absl::Status OpenSslError(absl::string_view what,
                          absl::StatusCode code = absl::StatusCode::kInternal);

// Makes `fd` the transport of `ssl` through a BIO that sends with
// MSG_NOSIGNAL (a peer that went away is an error, never a SIGPIPE) and
// leaves the descriptor open when the SSL is freed. The socket may be
// non-blocking: SSL calls then say SSL_ERROR_WANT_READ / _WANT_WRITE.
bool SslSetSocket(SSL* ssl, int fd);

// A server context from PEM files (TLS 1.2 at least): the certificate chain
// and its private key, checked to match. FailedPrecondition naming the file.
absl::StatusOr<SslCtxPtr> ServerContext(const std::string& cert_file, const std::string& key_file);

// A client context that verifies the peer against `ca_file` (empty: the
// system's CAs), or does not verify at all with `insecure`.
absl::StatusOr<SslCtxPtr> ClientContext(const std::string& ca_file, bool insecure);

// A server context from a certificate and key file, loaded again when either
// file changes (a Secret update), checked at most every `check_every`; a new
// pair that does not load is logged and the old one keeps serving. Used from
// one thread (the server's loop).
class ServerCertificate {
 public:
  ServerCertificate(std::string cert_file, std::string key_file, absl::Duration check_every)
      : cert_file_(std::move(cert_file)),
        key_file_(std::move(key_file)),
        check_every_(check_every) {}

  // The first load: FailedPrecondition naming the file that does not load.
  absl::Status Load();
  // The context for a new connection (SSL_new takes its own reference).
  SSL_CTX* Current();
  uint64_t reloads() const { return reloads_.load(); }

 private:
  const std::string cert_file_, key_file_;
  const absl::Duration check_every_;
  SslCtxPtr ctx_;
  struct timespec cert_mtime_ = {}, key_mtime_ = {};
  absl::Time next_check_;
  std::atomic<uint64_t> reloads_{0};
};

}  // namespace fabric

#endif  // FABRIC_AGENT_HTTP_OPENSSL_H_
