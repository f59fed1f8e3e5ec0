// The one HTTP/1.1 GET client for the agent's own endpoints (/metrics,
// /v1/node, /v1/peers): what fabricctl and the tests use to talk to a local
// agent. Plain TCP, one request per connection, read to EOF; no TLS, since
// the agent serves none.
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

}  // namespace fabric

#endif  // FABRIC_AGENT_HTTP_GET_H_
