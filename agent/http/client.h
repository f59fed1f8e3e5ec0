// The agent's one HTTP/1.1 client, over the OpenSSL the agent already links
// (and plain TCP for http://): the Kubernetes API (agent/kubeapi, its long
// watch streams included), the TokenReview and SubjectAccessReview of the
// TLS /v1/pods, and fabricctl's GETs of the agent's endpoints (get.h).
//  - https:// verifies the server's certificate against a CA file (or the
//    system's CAs) and its name (DNS or IP), unless `insecure`;
//  - every exchange has a deadline (connect, TLS handshake, request and the
//    whole answer), and a Canceller ends it from another thread at once (a
//    watch stream that waits for the server's next byte included);
//  - bodies framed by Content-Length, chunked transfer coding, or the end of
//    the connection; a 200's body can be streamed to a callback as it comes;
//  - connections are kept alive and reused (a few idle ones per client, an
//    idle one the server has closed is never used);
//  - errors as absl::Status: kFailedPrecondition (a certificate that does not
//    verify, a CA file that does not load), kDeadlineExceeded, kCancelled,
//    kUnavailable (cannot connect, the connection broke), kDataLoss (not an
//    HTTP answer), kResourceExhausted (a body over the bound). The message
//    names the server (host:port) but no credential. Thread-safe.
#ifndef FABRIC_AGENT_HTTP_CLIENT_H_
#define FABRIC_AGENT_HTTP_CLIENT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/base/canceller.h"
#include "agent/http/openssl.h"
#include "agent/http/response.h"

namespace fabric {

struct HttpClientOptions {
  std::string base_url;     // "https://host[:port]" or "http://host[:port]"; IPv6 in brackets
  std::string ca_file;      // https: the PEM bundle the server must chain to; "": the system's
  bool insecure = false;    // https: no certificate check at all (tests)
  std::string server_name;  // https: the name the certificate must carry; "": the URL's host
  absl::Duration connect_timeout = absl::Seconds(10);  // within each exchange's own deadline
  size_t max_idle_connections = 4;
  absl::Duration max_idle = absl::Seconds(30);  // an idle connection older than this is closed
};

struct HttpClientRequest {
  std::string method = "GET";
  std::string target = "/";  // path and query
  HttpHeaders headers;       // besides Host and Content-Length
  const std::string* body = nullptr;
  absl::Duration timeout = absl::Seconds(30);  // the whole exchange
  Canceller* cancel = nullptr;                 // may be null
  size_t max_body_bytes = 64 << 20;            // a buffered body
  // Set: a 200 answer's body is handed here as it arrives (any split), not
  // kept; returning false ends the exchange early (the response says stopped).
  std::function<bool(absl::string_view data)> on_body;
};

struct HttpClientResponse {
  int status = 0;
  std::string body;      // empty when streamed to on_body
  bool stopped = false;  // on_body returned false
};

class HttpClient {
 public:
  // kInvalidArgument for a base URL that is not http(s)://host[:port]. A CA
  // file that does not load is not an error here: each exchange fails with
  // kFailedPrecondition naming it until it loads (a Secret not yet mounted).
  static absl::StatusOr<std::unique_ptr<HttpClient>> Create(HttpClientOptions options);
  ~HttpClient();

  absl::StatusOr<HttpClientResponse> Send(const HttpClientRequest& request);

  // "host:port", as messages name the server.
  const std::string& authority() const { return authority_; }

 private:
  struct Connection;
  class Exchange;
  explicit HttpClient(HttpClientOptions options);

  // An idle connection still open, or a new one; the deadline covers connect
  // and handshake.
  absl::StatusOr<std::unique_ptr<Connection>> Take(Exchange& ex, bool* reused);
  void Give(std::unique_ptr<Connection> c);
  absl::StatusOr<std::unique_ptr<Connection>> Connect(Exchange& ex);
  // The TLS context, loaded on first use (and tried again while it fails).
  absl::StatusOr<SSL_CTX*> Context();
  absl::StatusOr<HttpClientResponse> SendOn(Connection& c, Exchange& ex,
                                            const HttpClientRequest& request, bool* reusable,
                                            bool* nothing_received);

  const HttpClientOptions options_;
  bool tls_ = false;
  std::string host_;  // without brackets
  int port_ = 0;
  std::string authority_;  // the Host header: "host:port" (IPv6 in brackets)
  std::mutex mu_;          // idle_, ctx_
  SslCtxPtr ctx_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_HTTP_CLIENT_H_
