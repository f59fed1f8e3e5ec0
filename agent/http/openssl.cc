#include "agent/http/openssl.h"

#include <fcntl.h>
#include <netdb.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fabric::podsapi {

absl::Status OpenSslError(absl::string_view what, absl::StatusCode code) {
  std::string detail;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&detail, detail.empty() ? "" : "; ", buf);
  }
  return absl::Status(code, absl::StrCat(what, detail.empty() ? "" : ": ", detail));
}

absl::StatusOr<SslCtxPtr> ServerContext(const std::string& cert_file, const std::string& key_file) {
  ERR_clear_error();
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return OpenSslError("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert_file.c_str()) != 1) {
    return OpenSslError(absl::StrCat("TLS certificate ", cert_file),
                        absl::StatusCode::kFailedPrecondition);
  }
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return OpenSslError(absl::StrCat("TLS key ", key_file), absl::StatusCode::kFailedPrecondition);
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    return OpenSslError(absl::StrCat("TLS key ", key_file, " does not match ", cert_file),
                        absl::StatusCode::kFailedPrecondition);
  }
  return ctx;
}

absl::StatusOr<SslCtxPtr> ClientContext(const std::string& ca_file, bool insecure) {
  ERR_clear_error();
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return OpenSslError("SSL_CTX_new");
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  if (insecure) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
    return ctx;
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  const int ok = ca_file.empty()
                     ? SSL_CTX_set_default_verify_paths(ctx.get())
                     : SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr);
  if (ok != 1) {
    return OpenSslError(absl::StrCat("CA file ", ca_file.empty() ? "(system)" : ca_file),
                        absl::StatusCode::kFailedPrecondition);
  }
  return ctx;
}

absl::StatusOr<UniqueFd> ConnectTcp(const std::string& host, int port, int timeout_ms) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("cannot connect to ", host));
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) continue;
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      if (::poll(&p, 1, timeout_ms) == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        errno = ETIMEDOUT;
      }
    }
    if (rc != 0) {
      last = absl::UnavailableError(
          absl::StrCat("cannot connect to ", host, ":", port, ": ", std::strerror(errno)));
      continue;
    }
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    // Back to blocking: the TLS calls below wait within the timeouts.
    const int fl = ::fcntl(fd.get(), F_GETFL);
    ::fcntl(fd.get(), F_SETFL, fl & ~O_NONBLOCK);
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

}  // namespace fabric::podsapi
