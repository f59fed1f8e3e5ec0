// KubeClient over the agent's HTTP client (agent/http/client.h, on the OpenSSL the agent already
// links): HTTPS verified against the config's CA, the bearer token re-read on rotation (and once
// more after a 401), JSON bodies, per-call timeouts, watch streams read line by line as they come.
// Thread-safe: concurrent calls use separate connections, each kept alive for the next call.
#ifndef FABRIC_AGENT_KUBEAPI_HTTP_KUBE_CLIENT_H_
#define FABRIC_AGENT_KUBEAPI_HTTP_KUBE_CLIENT_H_

#include <memory>
#include <optional>
#include <string>

#include "agent/http/client.h"
#include "agent/kubeapi/kube_client.h"
#include "agent/kubeapi/kube_config.h"

namespace fabric::kubeapi {

class HttpKubeClient : public KubeClient {
 public:
  // Fails when config.server is not an http(s) URL.
  static absl::StatusOr<std::unique_ptr<HttpKubeClient>> Create(KubeConfig config);
  ~HttpKubeClient() override;

  absl::StatusOr<nlohmann::json> Get(absl::string_view object_path) override;
  absl::StatusOr<ObjectList> List(absl::string_view collection_path,
                                  const ListOptions& options) override;
  absl::StatusOr<nlohmann::json> Create(absl::string_view collection_path,
                                        const nlohmann::json& object) override;
  absl::StatusOr<nlohmann::json> Update(absl::string_view object_path,
                                        const nlohmann::json& object) override;
  absl::Status Delete(absl::string_view object_path, const DeleteOptions& options) override;
  absl::StatusOr<nlohmann::json> Patch(absl::string_view object_path, const nlohmann::json& patch,
                                       PatchType type) override;
  absl::StatusOr<nlohmann::json> Apply(absl::string_view object_path, const nlohmann::json& object,
                                       absl::string_view field_manager, bool force = true) override;
  absl::Status StreamWatch(absl::string_view collection_path, const WatchRequest& request,
                           const WatchLineHandler& on_line, Canceller* cancel) override;

  // Largest response body accepted for a non-watch call.
  static constexpr size_t kMaxBodyBytes = 64 << 20;

 private:
  struct Call;  // one request's state
  HttpKubeClient(KubeConfig config, std::unique_ptr<HttpClient> http);

  // Runs one request (with the current token, and once more with a re-read
  // one after a 401); the body is kept whole, or (for watches) streamed.
  absl::StatusOr<HttpClientResponse> Perform(Call& call);
  absl::StatusOr<nlohmann::json> JsonCall(absl::string_view verb, const char* method,
                                          absl::string_view path, std::string query,
                                          const std::string* body, const char* content_type,
                                          Canceller* cancel = nullptr);

  const KubeConfig config_;
  const std::unique_ptr<HttpClient> http_;
  std::optional<TokenFile> token_;
};

}  // namespace fabric::kubeapi

#endif  // FABRIC_AGENT_KUBEAPI_HTTP_KUBE_CLIENT_H_
