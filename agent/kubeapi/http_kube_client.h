// KubeClient over libcurl (OpenSSL; loaded with dlopen, curl_library.h): HTTPS verified against the
// config's CA, the bearer token re-read on rotation (and once more after a 401), JSON bodies,
// per-call timeouts. Thread-safe: concurrent calls use separate pooled handles, each keeping its
// connection alive for the next call.
#ifndef FABRIC_AGENT_KUBEAPI_HTTP_KUBE_CLIENT_H_
#define FABRIC_AGENT_KUBEAPI_HTTP_KUBE_CLIENT_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "agent/kubeapi/curl_library.h"
#include "agent/kubeapi/kube_client.h"
#include "agent/kubeapi/kube_config.h"

namespace fabric::kubeapi {

class HttpKubeClient : public KubeClient {
 public:
  // Fails if libcurl cannot be loaded (curl_library.h) or initialised.
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

  struct Call;  // one request's state (public only for the curl callback)

 private:
  struct Handle;  // a curl easy handle with its own multi handle
  HttpKubeClient(KubeConfig config, const CurlApi* curl);

  // Runs one request; the body is kept whole, or (for watches) streamed.
  struct Response {
    long code = 0;
    std::string body;
  };
  absl::StatusOr<Response> Perform(Call& call);
  absl::StatusOr<Response> PerformOnce(Call& call, const std::string& token);
  absl::StatusOr<nlohmann::json> JsonCall(absl::string_view verb, const char* method,
                                          absl::string_view path, std::string query,
                                          const std::string* body, const char* content_type,
                                          Canceller* cancel = nullptr);
  std::unique_ptr<Handle> TakeHandle();
  void ReturnHandle(std::unique_ptr<Handle> h);
  std::string Escape(absl::string_view s);

  const KubeConfig config_;
  const CurlApi* const curl_;
  std::optional<TokenFile> token_;
  std::mutex pool_mu_;
  std::vector<std::unique_ptr<Handle>> pool_;
};

}  // namespace fabric::kubeapi

#endif  // FABRIC_AGENT_KUBEAPI_HTTP_KUBE_CLIENT_H_
