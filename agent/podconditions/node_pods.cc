#include "agent/podconditions/node_pods.h"

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"

namespace fabric::podconditions {
namespace {

kubeapi::WatchOptions WithPath(kubeapi::WatchOptions o, const std::string& node) {
  o.collection_path = "/api/v1/pods";
  o.field_selector = absl::StrCat("spec.nodeName=", node);
  return o;
}

}  // namespace

NodePods::NodePods(kubeapi::KubeClient* client, std::string node, kubeapi::WatchOptions options)
    : node_(std::move(node)), watch_(client, WithPath(std::move(options), node_), this) {}

NodePods::~NodePods() { Stop(); }

void NodePods::Start() {
  thread_ = std::thread([this] { (void)watch_.Run(); });
}

void NodePods::Stop() {
  watch_.Stop();
  if (thread_.joinable()) thread_.join();
}

std::map<std::string, PodInfo> NodePods::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pods_;
}

void NodePods::Put(PodInfo pod) {
  if (pod.node != node_) return;
  std::lock_guard<std::mutex> lock(mu_);
  KeepLocked(std::move(pod));
}

void NodePods::KeepLocked(PodInfo pod) {
  auto it = pods_.find(pod.uid);
  if (it != pods_.end() &&
      kubeapi::CompareResourceVersions(it->second.resource_version, pod.resource_version)
              .value_or(-1) > 0) {
    return;  // a lagging watch event, or a patch answer the watch overtook
  }
  pods_[pod.uid] = std::move(pod);
}

std::optional<PodInfo> NodePods::Parse(const nlohmann::json& object) {
  auto p = ParsePod(object);
  if (p.ok()) return *std::move(p);
  if (parse_errors_++ % 100 == 0) {
    LogWarn(Component::kPods, "a Pod from the API server was skipped: {}", p.status().message());
  }
  return std::nullopt;
}

void NodePods::OnList(const kubeapi::ObjectList& list) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A Pod the list no longer has is gone; one it has is kept at the newer
    // of the two versions (a patch may have answered after the list's
    // snapshot was taken).
    std::map<std::string, PodInfo> before;
    before.swap(pods_);
    for (const auto& o : list.items) {
      std::optional<PodInfo> p = Parse(o);
      if (!p.has_value()) continue;
      if (auto held = before.find(p->uid); held != before.end()) {
        pods_[p->uid] = std::move(held->second);
      }
      KeepLocked(*std::move(p));
    }
  }
  if (!synced_.exchange(true)) {
    LogInfo(Component::kPods, "watching the Pods of node {} ({} now)", node_, list.items.size());
  }
}

void NodePods::OnEvent(const kubeapi::WatchEvent& event) {
  std::lock_guard<std::mutex> lock(mu_);
  if (event.type == kubeapi::WatchEvent::Type::kDeleted) {
    auto p = ParsePod(event.object);
    if (p.ok()) pods_.erase(p->uid);
    return;
  }
  if (std::optional<PodInfo> p = Parse(event.object)) KeepLocked(*std::move(p));
}

void NodePods::OnError(const absl::Status& error, absl::Duration retry_in) {
  LogWarn(Component::kPods, "watching the Pods of node {}: {} (retry in {})", node_,
          error.message(), absl::FormatDuration(retry_in));
}

}  // namespace fabric::podconditions
