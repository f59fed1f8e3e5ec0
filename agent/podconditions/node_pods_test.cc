// NodePods keeps the newest version of each Pod whichever source brings it:
// a watch event that lags behind the agent's own patch must not replace the
// object the patch answered (issue 32 item 6). Driven through its handler
// interface; no watch runs.
#include "agent/podconditions/node_pods.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::podconditions {
namespace {

using json = nlohmann::json;

// Pod m0 at `rv`, with our Transport condition when `reason` is set.
json PodAt(const std::string& rv, const std::string& reason = "") {
  json pod = {{"metadata", {{"uid", "u1"}, {"namespace", "ml"}, {"name", "m0"}}},
              {"spec", {{"nodeName", "node-a"}, {"containers", {{{"name", "engine"}}}}}},
              {"status", {{"phase", "Running"}}}};
  pod["metadata"]["resourceVersion"] = rv;
  if (!reason.empty()) {
    pod["status"]["conditions"] = {{{"type", kTransport},
                                    {"status", "True"},
                                    {"reason", reason},
                                    {"lastTransitionTime", "2027-01-15T08:00:00Z"}}};
  }
  return pod;
}

kubeapi::WatchEvent Modified(const json& pod) {
  kubeapi::WatchEvent e;
  e.type = kubeapi::WatchEvent::Type::kModified;
  e.object = pod;
  e.resource_version = pod["metadata"]["resourceVersion"].get<std::string>();
  return e;
}

PodInfo Parsed(const json& pod) {
  auto p = ParsePod(pod);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : PodInfo{};
}

std::string HeldVersion(const NodePods& pods) { return pods.Snapshot().at("u1").resource_version; }

TEST(NodePodsTest, ALaggingWatchEventDoesNotReplaceWhatAPatchAnswered) {
  NodePods pods(nullptr, "node-a");
  kubeapi::ObjectList list;
  list.resource_version = "10";
  list.items = {PodAt("10")};
  pods.OnList(list);
  ASSERT_TRUE(pods.synced());

  // The agent's patch answered version 12, with the condition it wrote.
  pods.Put(Parsed(PodAt("12", "Rdma")));
  // The watch still delivers the kubelet's write before it (11): older.
  pods.OnEvent(Modified(PodAt("11")));
  EXPECT_EQ(HeldVersion(pods), "12");
  EXPECT_EQ(pods.Snapshot().at("u1").fabric_conditions.count(kTransport), 1u);
  // Then the patch's own event, and a later kubelet write: each replaces it.
  pods.OnEvent(Modified(PodAt("12", "Rdma")));
  EXPECT_EQ(HeldVersion(pods), "12");
  pods.OnEvent(Modified(PodAt("13", "Rdma")));
  EXPECT_EQ(HeldVersion(pods), "13");

  // A patch answer the watch already overtook is the older one now.
  pods.OnEvent(Modified(PodAt("15", "Idle")));
  pods.Put(Parsed(PodAt("14", "Rdma")));
  EXPECT_EQ(HeldVersion(pods), "15");
  EXPECT_EQ(pods.Snapshot().at("u1").fabric_conditions.at(kTransport).reason, "Idle");

  // A re-list served from a cache behind the newest write keeps the newer
  // Pod; a Pod the list no longer has is gone.
  list.resource_version = "14";
  list.items = {PodAt("14", "Rdma")};
  pods.OnList(list);
  EXPECT_EQ(HeldVersion(pods), "15");
  list.items.clear();
  pods.OnList(list);
  EXPECT_TRUE(pods.Snapshot().empty());
}

TEST(NodePodsTest, VersionsThatAreNotIntegersAreNotOrdered) {
  // A server whose versions are not KEP-5504's integers: the latest arrival
  // wins, as it did before versions were compared.
  NodePods pods(nullptr, "node-a");
  kubeapi::ObjectList list;
  list.resource_version = "b";
  list.items = {PodAt("b")};
  pods.OnList(list);
  pods.Put(Parsed(PodAt("c", "Rdma")));
  pods.OnEvent(Modified(PodAt("a")));
  EXPECT_EQ(HeldVersion(pods), "a");
}

}  // namespace
}  // namespace fabric::podconditions
