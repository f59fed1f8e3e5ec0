#include "agent/podsapi/pods_route.h"

#include "agent/base/json_text.h"

namespace fabric::podsapi {

HttpAnswer ServeAuthorized(const TlsRequest& request, PodsAuthorizer& authorizer,
                           const PodsHandler& pods) {
  auto error = [](int status, const std::string& why) {
    return HttpAnswer{status, "application/json", DumpJson(nlohmann::json{{"error", why}}) + "\n"};
  };
  const std::optional<PodsAccess> access = AccessFor(request.path);
  if (!access.has_value()) {
    return error(404, "no such path: this port serves /v1/pods and /v1/pods/{namespace}/{pod}");
  }
  const AuthDecision d = authorizer.Check(request.bearer_token, *access);
  if (d.status != 200) return error(d.status, d.error);
  return pods(request.path, request.query);
}

}  // namespace fabric::podsapi
