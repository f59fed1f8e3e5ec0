#include "agent/podsapi/authorizer.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/base/json_text.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/base/utf8.h"

namespace fabric::podsapi {
namespace {

std::string Sha256(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(s.data(), s.size(), md, &len, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(md), len));
}

// The body of a 503: which review could not be made and, in general terms,
// why. Never the status message itself: it names the API server's URL, the
// CA file, and in a 403's text the agent's own ServiceAccount.
std::string CannotReview(absl::string_view what, const absl::Status& s) {
  const char* why = "the API server answered with an error";
  switch (s.code()) {
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      why = "the API server refused the agent's request";
      break;
    case absl::StatusCode::kFailedPrecondition:
      why = "the agent cannot verify the API server";
      break;
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnavailable:
      why = "the API server did not answer";
      break;
    default:
      break;
  }
  return absl::StrCat("cannot check the ", what, ": ", why, " (the agent's log has the details)");
}

}  // namespace

std::optional<PodsAccess> AccessFor(const std::string& path) {
  if (path == "/v1/pods" || path == "/v1/pods/") return PodsAccess{"list", "", ""};
  if (!absl::StartsWith(path, "/v1/pods/")) return std::nullopt;
  std::vector<std::string> parts = absl::StrSplit(path.substr(9), '/');
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) return std::nullopt;
  return PodsAccess{"get", parts[0], parts[1]};
}

PodsAuthorizer::PodsAuthorizer(kubeapi::KubeClient* client, AuthorizerOptions options)
    : client_(client), options_(std::move(options)) {
  if (!options_.now) options_.now = [] { return MonotonicNow(); };
}

size_t PodsAuthorizer::cached_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_.size();
}

template <typename V>
void PodsAuthorizer::Put(std::map<std::string, Entry<V>>& cache, const std::string& key, V value,
                         absl::Duration ttl) {
  const absl::Time now = options_.now();
  if (cache.size() >= options_.max_entries && cache.find(key) == cache.end()) {
    for (auto it = cache.begin(); it != cache.end();) {
      it = it->second.expires <= now ? cache.erase(it) : std::next(it);
    }
    while (cache.size() >= options_.max_entries) {  // still full: the soonest to expire goes
      auto victim = cache.begin();
      for (auto it = cache.begin(); it != cache.end(); ++it) {
        if (it->second.expires < victim->second.expires) victim = it;
      }
      cache.erase(victim);
    }
  }
  cache[key] = Entry<V>{std::move(value), now + ttl};
}

void PodsAuthorizer::LogFailure(const char* review, const absl::Status& s) {
  // The first, then every 100th: a client retrying while the API server is
  // away cannot flood the log.
  const uint64_t n = review_failures_++;
  if (n % 100 == 0) {
    LogWarn(Component::kPods, "/v1/pods: the {} failed, answered 503 ({} so far): {}", review,
            n + 1, s.message());
  }
}

absl::StatusOr<PodsAuthorizer::Identity> PodsAuthorizer::Review(const std::string& token,
                                                                const std::string& audience) {
  ++token_reviews_;
  nlohmann::json spec = {{"token", token}};
  if (!audience.empty()) spec["audiences"] = nlohmann::json::array({audience});
  const nlohmann::json review = {
      {"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}, {"spec", spec}};
  auto r = client_->Create("/apis/authentication.k8s.io/v1/tokenreviews", review);
  if (!r.ok()) return r.status();
  Identity id;
  const nlohmann::json& st = (*r)["status"];
  id.authenticated = st.is_object() && st.value("authenticated", false);
  if (id.authenticated && st.contains("user") && st["user"].is_object()) id.user = st["user"];
  if (st.is_object() && st.contains("error") && st["error"].is_string()) {
    id.error = st["error"].get<std::string>();
  }
  // The API server answers with the audiences the token is valid for among
  // those asked; an authenticator that ignored them would answer others.
  // TokenReview's contract: the client checks.
  if (id.authenticated && !audience.empty()) {
    bool granted = false;
    const auto auds = st.find("audiences");
    if (auds != st.end() && auds->is_array()) {
      for (const nlohmann::json& a : *auds) granted = granted || (a.is_string() && a == audience);
    }
    if (!granted) {
      id = Identity{};
      id.error = absl::StrCat("the review's status.audiences lack \"", audience, "\"");
      if (audience_mismatches_++ % 100 == 0) {
        LogWarn(Component::kPods,
                "/v1/pods: a TokenReview authenticated a token but not for audience \"{}\" (an "
                "authenticator that ignores audiences?); refused ({} so far)",
                audience, audience_mismatches_.load());
      }
    }
  }
  return id;
}

absl::StatusOr<std::pair<bool, std::string>> PodsAuthorizer::Access(const nlohmann::json& user,
                                                                    const PodsAccess& access) {
  ++access_reviews_;
  nlohmann::json attrs = {{"verb", access.verb}, {"resource", "pods"}, {"version", "v1"}};
  if (!access.ns.empty()) attrs["namespace"] = access.ns;
  if (!access.name.empty()) attrs["name"] = access.name;
  nlohmann::json spec = {{"resourceAttributes", attrs}, {"user", user.value("username", "")}};
  for (const char* k : {"uid", "groups", "extra"}) {
    if (user.contains(k)) spec[k] = user[k];
  }
  const nlohmann::json sar = {
      {"apiVersion", "authorization.k8s.io/v1"}, {"kind", "SubjectAccessReview"}, {"spec", spec}};
  auto r = client_->Create("/apis/authorization.k8s.io/v1/subjectaccessreviews", sar);
  if (!r.ok()) return r.status();
  const nlohmann::json& st = (*r)["status"];
  const bool allowed = st.is_object() && st.value("allowed", false) && !st.value("denied", false);
  std::string reason = st.is_object() && st.contains("reason") && st["reason"].is_string()
                           ? st["reason"].get<std::string>()
                           : "";
  return std::make_pair(allowed, reason);
}

AuthDecision PodsAuthorizer::Check(const std::string& bearer_token, const PodsAccess& access) {
  AuthDecision d;
  if (bearer_token.empty()) {
    return {401, "no bearer token: send a ServiceAccount token (Authorization: Bearer ...)", ""};
  }
  const std::string token_key = Sha256(bearer_token);
  std::optional<Identity> id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tokens_.find(token_key);
    if (it != tokens_.end() && it->second.expires > options_.now()) id = it->second.value;
  }
  if (!id.has_value()) {
    auto r = Review(bearer_token, options_.audience);
    if (r.ok() && !r->authenticated && options_.accept_apiserver_tokens) {
      auto apiserver = Review(bearer_token, "");
      if (!apiserver.ok() || apiserver->authenticated) r = std::move(apiserver);
    }
    if (!r.ok()) {
      LogFailure("TokenReview", r.status());
      return {503, CannotReview("token", r.status()), ""};
    }
    std::lock_guard<std::mutex> lock(mu_);
    Put(tokens_, token_key, *r,
        r->authenticated ? options_.authenticated_ttl : options_.unauthenticated_ttl);
    id = *std::move(r);
  }
  if (!id->authenticated) {
    // The review's own error stays in the log: an authenticator's text may
    // name more than the client needs to know.
    if (!id->error.empty()) {
      LogDebug(Component::kPods, "/v1/pods: token refused: {}", EscapeBytes(id->error, 300));
    }
    return {
        401,
        absl::StrCat("the token is not valid: it must be a ServiceAccount token for audience \"",
                     options_.audience, "\"",
                     options_.accept_apiserver_tokens ? " or for the API server" : "",
                     " (a projected token, docs/security.md)"),
        ""};
  }
  d.user = id->user.value("username", "");
  const std::string decision_key =
      absl::StrCat(DumpJson(id->user), "\n", access.verb, "\n", access.ns, "\n", access.name);
  std::optional<std::pair<bool, std::string>> allowed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = decisions_.find(decision_key);
    if (it != decisions_.end() && it->second.expires > options_.now()) allowed = it->second.value;
  }
  if (!allowed.has_value()) {
    auto r = Access(id->user, access);
    if (!r.ok()) {
      LogFailure("SubjectAccessReview", r.status());
      return {503, CannotReview("access", r.status()), d.user};
    }
    std::lock_guard<std::mutex> lock(mu_);
    Put(decisions_, decision_key, *r, r->first ? options_.allowed_ttl : options_.denied_ttl);
    allowed = *std::move(r);
  }
  if (!allowed->first) {
    d.status = 403;
    d.error = absl::StrCat("user \"", d.user, "\" may not ", access.verb, " pods",
                           access.ns.empty() ? " at the cluster scope"
                                             : absl::StrCat(" in namespace \"", access.ns, "\""),
                           allowed->second.empty() ? "" : absl::StrCat(": ", allowed->second));
  }
  return d;
}

}  // namespace fabric::podsapi
