// GET over TLS for fabricctl observe and the tests: verifies the agent's
// certificate (a CA file, or the system's) and its name, and sends a bearer
// token. One request per connection, read to EOF.
#ifndef FABRIC_AGENT_HTTP_HTTPS_GET_H_
#define FABRIC_AGENT_HTTP_HTTPS_GET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/http/get.h"

namespace fabric::podsapi {

struct HttpsOptions {
  std::string ca_file;      // PEM bundle the agent's certificate must chain to; "": the system's
  bool insecure = false;    // no certificate check at all (tests, a first look)
  std::string server_name;  // the name the certificate must carry; "": the URL's host
  std::string bearer_token;
  absl::Duration timeout = absl::Seconds(10);
};

// `base`: "https://host:port" (IPv6 in brackets). Unavailable when the agent
// cannot be reached, FailedPrecondition when its certificate does not verify
// (the message says against what); any HTTP status is a response.
absl::StatusOr<HttpResponse> HttpsGet(const std::string& base, const std::string& path,
                                      const HttpsOptions& options);

}  // namespace fabric::podsapi

#endif  // FABRIC_AGENT_HTTP_HTTPS_GET_H_
