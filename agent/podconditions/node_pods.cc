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
  pods_[pod.uid] = std::move(pod);
}

void NodePods::Keep(const nlohmann::json& object) {
  auto p = ParsePod(object);
  if (!p.ok()) {
    if (parse_errors_++ % 100 == 0) {
      LogWarn(Component::kPods, "a Pod from the API server was skipped: {}", p.status().message());
    }
    return;
  }
  pods_[p->uid] = *std::move(p);
}

void NodePods::OnList(const kubeapi::ObjectList& list) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pods_.clear();
    for (const auto& o : list.items) Keep(o);
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
  Keep(event.object);
}

void NodePods::OnError(const absl::Status& error, absl::Duration retry_in) {
  LogWarn(Component::kPods, "watching the Pods of node {}: {} (retry in {})", node_,
          error.message(), absl::FormatDuration(retry_in));
}

}  // namespace fabric::podconditions
