// The TLS /v1/pods route: the path's access (authorizer.h), the token and
// access reviewed, then the observer's answer. 401/403/404/503 as JSON
// {"error": "..."}.
#ifndef FABRIC_AGENT_PODSAPI_PODS_ROUTE_H_
#define FABRIC_AGENT_PODSAPI_PODS_ROUTE_H_

#include <functional>
#include <string>

#include "agent/http/response.h"
#include "agent/podsapi/authorizer.h"
#include "agent/podsapi/tls_server.h"

namespace fabric::podsapi {

using PodsHandler = std::function<HttpAnswer(const std::string& path, const std::string& query)>;

HttpAnswer ServeAuthorized(const TlsRequest& request, PodsAuthorizer& authorizer,
                           const PodsHandler& pods);

}  // namespace fabric::podsapi

#endif  // FABRIC_AGENT_PODSAPI_PODS_ROUTE_H_
