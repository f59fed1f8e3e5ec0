#include "agent/http/https_get.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/http/openssl.h"

namespace fabric::podsapi {
namespace {

bool IsIp(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

absl::StatusOr<HttpResponse> HttpsGet(const std::string& base, const std::string& path,
                                      const HttpsOptions& o) {
  absl::string_view rest = base;
  if (!absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("'", base, "' is not https://host:port"));
  }
  while (absl::ConsumeSuffix(&rest, "/")) {
  }
  std::string host;
  int port = 443;
  const size_t colon = rest.rfind(':');
  const size_t bracket = rest.rfind(']');
  if (colon != std::string::npos && (bracket == std::string::npos || colon > bracket)) {
    host = std::string(rest.substr(0, colon));
    if (!absl::SimpleAtoi(rest.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("'", base, "': bad port"));
    }
  } else {
    host = std::string(rest);
  }
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  auto ctx = ClientContext(o.ca_file, o.insecure);
  if (!ctx.ok()) return ctx.status();
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(o.timeout));
  auto fd = ConnectTcp(host, port, timeout_ms);
  if (!fd.ok()) return fd.status();
  SslPtr ssl(SSL_new(ctx->get()));
  if (!ssl) return OpenSslError("SSL_new");
  const std::string name = o.server_name.empty() ? host : o.server_name;
  if (!o.insecure) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
    if (IsIp(name)) {
      X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
    } else {
      X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
    }
  }
  if (!IsIp(name)) SSL_set_tlsext_host_name(ssl.get(), name.c_str());
  SSL_set_fd(ssl.get(), fd->get());
  if (SSL_connect(ssl.get()) != 1) {
    const long v = SSL_get_verify_result(ssl.get());
    if (v != X509_V_OK) {
      ERR_clear_error();
      return absl::FailedPreconditionError(
          absl::StrCat("TLS: the agent's certificate does not verify as '", name, "' against ",
                       o.ca_file.empty() ? "the system's CAs" : o.ca_file, ": ",
                       X509_verify_cert_error_string(v)));
    }
    return OpenSslError(absl::StrCat("TLS handshake with ", base), absl::StatusCode::kUnavailable);
  }
  std::string req = absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host,
                                 "\r\nUser-Agent: fabricctl\r\nConnection: close\r\n");
  if (!o.bearer_token.empty())
    absl::StrAppend(&req, "Authorization: Bearer ", o.bearer_token, "\r\n");
  req += "\r\n";
  if (SSL_write(ssl.get(), req.data(), static_cast<int>(req.size())) <= 0) {
    return OpenSslError(absl::StrCat("TLS write to ", base), absl::StatusCode::kUnavailable);
  }
  std::string resp;
  char buf[16384];
  while (true) {
    const int n = SSL_read(ssl.get(), buf, sizeof(buf));
    if (n <= 0) break;
    resp.append(buf, static_cast<size_t>(n));
    if (resp.size() > (64u << 20)) return absl::ResourceExhaustedError("answer over 64 MiB");
  }
  ERR_clear_error();
  if (!absl::StartsWith(resp, "HTTP/1.")) {
    return absl::UnavailableError(absl::StrCat(base, path, ": no HTTP answer"));
  }
  HttpResponse r;
  r.status = std::atoi(resp.c_str() + 9);
  const size_t end = resp.find("\r\n\r\n");
  if (end != std::string::npos) r.body = resp.substr(end + 4);
  return r;
}

}  // namespace fabric::podsapi
