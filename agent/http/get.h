// GET from the agent's own endpoints (/metrics, /v1/node, /v1/peers, and
// /v1/pods plain or over TLS): what fabricctl and the tests use to talk to an
// agent. One request on the HTTP client (client.h), the whole body kept.
#ifndef FABRIC_AGENT_HTTP_GET_H_
#define FABRIC_AGENT_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace fabric {

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET `path` from `base`: "host:port", "http://host:port" or "[v6]:port"
// (a trailing "/" is ignored). Unavailable when the agent cannot be reached
// or does not answer within `timeout`; any HTTP status is a response.
absl::StatusOr<HttpResponse> HttpGet(const std::string& base, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(10));

struct HttpsOptions {
  std::string ca_file;      // PEM bundle the agent's certificate must chain to; "": the system's
  bool insecure = false;    // no certificate check at all (tests, a first look)
  std::string server_name;  // the name the certificate must carry; "": the URL's host
  std::string bearer_token;
  absl::Duration timeout = absl::Seconds(10);
};

// The same over TLS with a bearer token. `base`: "https://host:port" (IPv6 in
// brackets). Unavailable when the agent cannot be reached, FailedPrecondition
// when its certificate does not verify (the message says against what).
absl::StatusOr<HttpResponse> HttpsGet(const std::string& base, const std::string& path,
                                      const HttpsOptions& options);

}  // namespace fabric

#endif  // FABRIC_AGENT_HTTP_GET_H_
