// This node's Pods, as the API server has them: one list + watch with the
// field selector spec.nodeName=<node>, so the API load grows with the node,
// not the cluster (kubeapi::Watch: resume, re-list on 410, backoff). Each
// Pod is kept parsed (pod_info.h). Thread-safe.
//
// Two sources write a Pod here: the watch, and the answers of the agent's own
// patches (Put). The watch can lag behind a patch's answer, so neither
// replaces a newer version of the same Pod with an older one: versions are
// ordered by kubeapi::CompareResourceVersions (KEP-5504; etcd's revision on
// every etcd3-backed server before it). Where a server's versions cannot be
// ordered, the latest arrival wins, as before.
#ifndef FABRIC_AGENT_PODCONDITIONS_NODE_PODS_H_
#define FABRIC_AGENT_PODCONDITIONS_NODE_PODS_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "agent/kubeapi/kube_client.h"
#include "agent/kubeapi/watch.h"
#include "agent/podconditions/pod_info.h"

namespace fabric::podconditions {

class NodePods : public kubeapi::WatchHandler {
 public:
  // `options` beyond the collection path and field selector (which this
  // sets) are the watch's backoff and timeouts.
  NodePods(kubeapi::KubeClient* client, std::string node, kubeapi::WatchOptions options = {});
  ~NodePods() override;

  void Start();  // the watch's own thread
  void Stop();

  // True once the first list answered (until then nothing is written).
  bool synced() const { return synced_.load(); }
  std::map<std::string, PodInfo> Snapshot() const;  // by UID
  // A Pod as a write answered it (newer than the watch may have delivered).
  void Put(PodInfo pod);
  const std::string& node() const { return node_; }
  uint64_t lists() const { return watch_.lists(); }

  void OnList(const kubeapi::ObjectList& list) override;
  void OnEvent(const kubeapi::WatchEvent& event) override;
  void OnError(const absl::Status& error, absl::Duration retry_in) override;

 private:
  // Stores `pod` unless the same Pod is held at a newer resourceVersion.
  void KeepLocked(PodInfo pod);
  // nullopt (counted, logged now and then) for an object that is no Pod.
  std::optional<PodInfo> Parse(const nlohmann::json& object);

  const std::string node_;
  kubeapi::Watch watch_;
  std::thread thread_;
  std::atomic<bool> synced_{false};
  mutable std::mutex mu_;
  std::map<std::string, PodInfo> pods_;  // by UID
  uint64_t parse_errors_ = 0;
};

}  // namespace fabric::podconditions

#endif  // FABRIC_AGENT_PODCONDITIONS_NODE_PODS_H_
