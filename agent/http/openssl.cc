#include "agent/http/openssl.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/http/net.h"

namespace fabric {
namespace {

struct timespec MtimeOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return st.st_mtim;
}

bool SameTime(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

int FdOf(BIO* b) { return static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(b))); }

int SocketWrite(BIO* b, const char* data, int len) {
  BIO_clear_retry_flags(b);
  const ssize_t n = ::send(FdOf(b), data, static_cast<size_t>(len), MSG_NOSIGNAL);
  if (n < 0 && TransientErrno(errno)) BIO_set_retry_write(b);
  return static_cast<int>(n);
}

int SocketRead(BIO* b, char* data, int len) {
  BIO_clear_retry_flags(b);
  const ssize_t n = ::recv(FdOf(b), data, static_cast<size_t>(len), 0);
  if (n < 0 && TransientErrno(errno)) BIO_set_retry_read(b);
  return static_cast<int>(n);
}

long SocketCtrl(BIO*, int cmd, long, void*) { return cmd == BIO_CTRL_FLUSH ? 1 : 0; }

int SocketCreate(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

const BIO_METHOD* SocketMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "fabric socket");
    BIO_meth_set_write(m, SocketWrite);
    BIO_meth_set_read(m, SocketRead);
    BIO_meth_set_ctrl(m, SocketCtrl);
    BIO_meth_set_create(m, SocketCreate);
    return m;
  }();
  return method;
}

}  // namespace

bool SslSetSocket(SSL* ssl, int fd) {
  BIO* bio = BIO_new(SocketMethod());
  if (bio == nullptr) return false;
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  SSL_set_bio(ssl, bio, bio);  // one BIO both ways; the SSL frees it
  return true;
}

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

absl::Status ServerCertificate::Load() {
  auto ctx = ServerContext(cert_file_, key_file_);
  if (!ctx.ok()) return ctx.status();
  ctx_ = *std::move(ctx);
  cert_mtime_ = MtimeOf(cert_file_);
  key_mtime_ = MtimeOf(key_file_);
  next_check_ = MonotonicNow() + check_every_;
  return absl::OkStatus();
}

SSL_CTX* ServerCertificate::Current() {
  const absl::Time now = MonotonicNow();
  if (now < next_check_) return ctx_.get();
  next_check_ = now + check_every_;
  const struct timespec c = MtimeOf(cert_file_), k = MtimeOf(key_file_);
  if (SameTime(c, cert_mtime_) && SameTime(k, key_mtime_)) return ctx_.get();
  auto ctx = ServerContext(cert_file_, key_file_);
  if (!ctx.ok()) {
    LogWarn(Component::kPods, "TLS certificate changed but does not load, keeping the old one: {}",
            ctx.status().message());
    return ctx_.get();
  }
  ctx_ = *std::move(ctx);
  cert_mtime_ = c;
  key_mtime_ = k;
  ++reloads_;
  LogInfo(Component::kPods, "TLS certificate reloaded from {}", cert_file_);
  return ctx_.get();
}

}  // namespace fabric
