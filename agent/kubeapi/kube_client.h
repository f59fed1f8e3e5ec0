// The Kubernetes API as the agent uses it: a few verbs on resource paths, JSON
// in and out, every API error as an absl::Status (api_status.h maps them).
// HttpKubeClient (http_kube_client.h) is the real one; tests may implement
// this interface in-process.
#ifndef FABRIC_AGENT_KUBEAPI_KUBE_CLIENT_H_
#define FABRIC_AGENT_KUBEAPI_KUBE_CLIENT_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/base/canceller.h"
#include "nlohmann/json.hpp"

namespace fabric::kubeapi {

// Interrupts a blocking call (a watch stream, a List, a backoff sleep) from
// another thread (agent/base/canceller.h).
using Canceller = ::fabric::Canceller;

struct ListOptions {
  std::string label_selector;  // e.g. "app=fabric,tier!=x"
  std::string field_selector;  // e.g. "spec.nodeName=node-a"
  // The list's resourceVersion parameter: "" (the default) is a quorum read
  // of etcd; "0" lets the API server answer from its watch cache; any other
  // value asks for a state not older than that version (see Watch).
  std::string resource_version;
  // Interrupts the call from another thread (kCancelled); may be null.
  Canceller* cancel = nullptr;
};

struct ObjectList {
  std::vector<nlohmann::json> items;
  std::string resource_version;  // the list's metadata.resourceVersion
};

struct DeleteOptions {
  // Preconditions: the server deletes only if the object still has them
  // (409 -> kAborted otherwise).
  std::optional<std::string> uid;
  std::optional<std::string> resource_version;
};

struct WatchRequest {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // watch events after this one
  bool allow_bookmarks = true;
  // Asks the server to end the stream after this long (timeoutSeconds); the
  // client also gives up some seconds after it, so a silent half-dead
  // connection cannot hold a watch forever.
  absl::Duration timeout = absl::Minutes(5);
  size_t max_line_bytes = 16 << 20;
};

// PATCH bodies: a strategic-merge patch (lists merged by their key, as the
// kubelet patches pods/status), a JSON merge patch (RFC 7386), or a JSON
// patch (RFC 6902).
enum class PatchType { kStrategicMerge, kMerge, kJson };
const char* PatchContentType(PatchType type);

// Orders two resourceVersions of objects of the same resource: -1, 0 or 1
// as `a` is older than, the same as or newer than `b`; nullopt when either is
// not comparable. The API called them opaque (compare for equality only)
// until KEP-5504 (Kubernetes 1.35) defined them as positive decimal integers
// without leading zeros, of any length, that grow with every write of the
// resource, and client-go compares them so
// (k8s.io/apimachinery/pkg/util/resourceversion.CompareResourceVersion).
// Every etcd3-backed API server before it already wrote etcd's revision
// there; a server that writes anything else (another storage, an
// aggregated API) gets nullopt, and the caller must not order them.
std::optional<int> CompareResourceVersions(absl::string_view a, absl::string_view b);

// One raw line of a watch stream (without its newline). Returning false ends
// the stream early (the call then returns OK).
using WatchLineHandler = std::function<bool(absl::string_view line)>;

class KubeClient {
 public:
  virtual ~KubeClient() = default;

  // `object_path` is e.g. /apis/resource.k8s.io/v1/namespaces/NS/resourceclaims/NAME,
  // `collection_path` e.g. /apis/resource.k8s.io/v1/resourceslices (build
  // them with ObjectPath/CollectionPath from api_status.h).
  virtual absl::StatusOr<nlohmann::json> Get(absl::string_view object_path) = 0;
  virtual absl::StatusOr<ObjectList> List(absl::string_view collection_path,
                                          const ListOptions& options) = 0;
  // kAlreadyExists when the name is taken.
  virtual absl::StatusOr<nlohmann::json> Create(absl::string_view collection_path,
                                                const nlohmann::json& object) = 0;
  // PUT; `object` must carry metadata.resourceVersion (the version it was
  // read at): a stale one is kAborted (409 Conflict), nothing is overwritten.
  virtual absl::StatusOr<nlohmann::json> Update(absl::string_view object_path,
                                                const nlohmann::json& object) = 0;
  virtual absl::Status Delete(absl::string_view object_path, const DeleteOptions& options) = 0;
  // PATCH `object_path` (which may end in a subresource, /status) with
  // `patch`; the answer is the object after it.
  virtual absl::StatusOr<nlohmann::json> Patch(absl::string_view object_path,
                                               const nlohmann::json& patch, PatchType type) = 0;
  // Server-side apply (create or update) as `field_manager`, forcing
  // ownership conflicts when `force`.
  virtual absl::StatusOr<nlohmann::json> Apply(absl::string_view object_path,
                                               const nlohmann::json& object,
                                               absl::string_view field_manager,
                                               bool force = true) = 0;
  // Opens ?watch=1 on `collection_path` and hands each line to `on_line`
  // until the server ends the stream (OK), an error, or `cancel` (kCancelled).
  // An error before the stream starts (e.g. 410) is the mapped API status.
  virtual absl::Status StreamWatch(absl::string_view collection_path, const WatchRequest& request,
                                   const WatchLineHandler& on_line, Canceller* cancel) = 0;
};

}  // namespace fabric::kubeapi

#endif  // FABRIC_AGENT_KUBEAPI_KUBE_CLIENT_H_
