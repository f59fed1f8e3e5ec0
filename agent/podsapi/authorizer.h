// Who may read /v1/pods over TLS, decided as the kubelet decides for its own
// API (webhook authentication and authorization): the bearer token goes to a
// TokenReview for the agent's own audience (--pods-token-audience: a Pod
// mounts a projected ServiceAccount token for it, which the API server itself
// refuses, so a token sent here cannot be replayed against the API; tokens
// for the API server's audience only with --pods-accept-apiserver-tokens),
// the user it names to a SubjectAccessReview for "get pods" in
// the Pod's namespace (/v1/pods/{ns}/{pod}) or "list pods" at the cluster
// scope (/v1/pods). Both answers are cached, bounded, with TTLs (the
// kubelet's defaults: 2 min for a token, 5 min allowed, 30 s denied or
// unauthenticated); the cache keys hold a SHA-256 of the token, never the
// token. Thread-safe; the API calls run outside the lock.
#ifndef FABRIC_AGENT_PODSAPI_AUTHORIZER_H_
#define FABRIC_AGENT_PODSAPI_AUTHORIZER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/kubeapi/kube_client.h"
#include "nlohmann/json.hpp"

namespace fabric::podsapi {

// The access a /v1/pods path asks for; nullopt for any other path.
struct PodsAccess {
  std::string verb;      // "get" | "list"
  std::string ns, name;  // empty for list
};
std::optional<PodsAccess> AccessFor(const std::string& path);

struct AuthDecision {
  int status = 200;  // 200, 401 (no or bad token), 403 (not allowed), 503 (cannot ask)
  // Why, for the JSON body: what failed, never the API server's URL, the CA
  // file or the agent's ServiceAccount (those are logged).
  std::string error;
  std::string user;  // who (when authenticated)
};

// The audience a Pod's token for /v1/pods is issued for (the chart's members
// mount a projected token for it; docs/security.md).
inline constexpr char kDefaultPodsTokenAudience[] = "fabric.gpustack.ai/pods-api";

struct AuthorizerOptions {
  // The TokenReview asks for this audience, and a review whose
  // status.audiences lacks it is refused. Not empty.
  std::string audience = kDefaultPodsTokenAudience;
  // Also accept a token for the API server's own audience (a Pod's default
  // ServiceAccount token), reviewed a second time without audiences: for
  // clients that cannot mount a projected token. Such a token also works
  // against the API server, so an agent that keeps one can replay it.
  bool accept_apiserver_tokens = false;
  absl::Duration authenticated_ttl = absl::Minutes(2);
  absl::Duration unauthenticated_ttl = absl::Seconds(30);
  absl::Duration allowed_ttl = absl::Minutes(5);
  absl::Duration denied_ttl = absl::Seconds(30);
  size_t max_entries = 1024;        // per cache
  std::function<absl::Time()> now;  // default: the monotonic clock
};

class PodsAuthorizer {
 public:
  PodsAuthorizer(kubeapi::KubeClient* client, AuthorizerOptions options);

  AuthDecision Check(const std::string& bearer_token, const PodsAccess& access);

  uint64_t token_reviews() const { return token_reviews_.load(); }
  uint64_t access_reviews() const { return access_reviews_.load(); }
  size_t cached_tokens() const;

 private:
  struct Identity {
    bool authenticated = false;
    std::string error;
    nlohmann::json user;  // TokenReview status.user
  };
  template <typename V>
  struct Entry {
    V value;
    absl::Time expires;
  };
  template <typename V>
  void Put(std::map<std::string, Entry<V>>& cache, const std::string& key, V value,
           absl::Duration ttl);
  // `audience` "": the API server's own.
  absl::StatusOr<Identity> Review(const std::string& token, const std::string& audience);
  void LogFailure(const char* review, const absl::Status& s);
  absl::StatusOr<std::pair<bool, std::string>> Access(const nlohmann::json& user,
                                                      const PodsAccess& access);

  kubeapi::KubeClient* const client_;
  AuthorizerOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Entry<Identity>> tokens_;                         // by SHA-256
  std::map<std::string, Entry<std::pair<bool, std::string>>> decisions_;  // by user + access
  std::atomic<uint64_t> token_reviews_{0}, access_reviews_{0}, review_failures_{0},
      audience_mismatches_{0};
};

}  // namespace fabric::podsapi

#endif  // FABRIC_AGENT_PODSAPI_AUTHORIZER_H_
