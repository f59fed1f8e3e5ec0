// Who may read /v1/pods over TLS, decided as the kubelet decides for its own
// API (webhook authentication and authorization): the bearer token goes to a
// TokenReview, the user it names to a SubjectAccessReview for "get pods" in
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
  int status = 200;   // 200, 401 (no or bad token), 403 (not allowed), 503 (cannot ask)
  std::string error;  // why, for the JSON body
  std::string user;   // who (when authenticated)
};

struct AuthorizerOptions {
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
  absl::StatusOr<Identity> Review(const std::string& token);
  absl::StatusOr<std::pair<bool, std::string>> Access(const nlohmann::json& user,
                                                      const PodsAccess& access);

  kubeapi::KubeClient* const client_;
  AuthorizerOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Entry<Identity>> tokens_;                         // by SHA-256
  std::map<std::string, Entry<std::pair<bool, std::string>>> decisions_;  // by user + access
  std::atomic<uint64_t> token_reviews_{0}, access_reviews_{0};
};

}  // namespace fabric::podsapi

#endif  // FABRIC_AGENT_PODSAPI_AUTHORIZER_H_
