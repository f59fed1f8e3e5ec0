#include "agent/base/host_paths.h"

#include <gtest/gtest.h>

namespace fabric {
namespace {

HostPaths Resolve(const KubeletPathFlags& flags) {
  HostPaths p = HostPaths::Defaults();
  EXPECT_TRUE(ApplyKubeletPathFlags(flags, &p).ok());
  return p;
}

TEST(HostPathsTest, DefaultsAreTheKubeletsOwn) {
  const HostPaths p = HostPaths::Defaults();
  EXPECT_EQ(p.DevicePluginDir(), "/var/lib/kubelet/device-plugins");
  EXPECT_EQ(p.PluginsRegistryDir(), "/var/lib/kubelet/plugins_registry");
  EXPECT_EQ(p.PodResourcesSocket(), "/var/lib/kubelet/pod-resources/kubelet.sock");
  EXPECT_EQ(p.KubeletCheckpoint(), "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
  EXPECT_EQ(Resolve({}).DevicePluginDir(), p.DevicePluginDir());
  EXPECT_EQ(Resolve({}).PluginsRegistryDir(), p.PluginsRegistryDir());
  EXPECT_EQ(Resolve({}).PodResourcesSocket(), p.PodResourcesSocket());
}

// What the real kubelet v1.20.2 does with --root-dir=/var/lib/k0s/kubelet:
// plugins_registry/ and pod-resources/ follow the root; device-plugins/ (with
// kubelet.sock and the checkpoint) stays under /var/lib/kubelet.
TEST(HostPathsTest, KubeletRootMovesOnlyTheRootFollowingPaths) {
  for (const char* root : {"/var/lib/k0s/kubelet", "/var/lib/k0s/kubelet/",
                           "/var/snap/microk8s/common/var/lib/kubelet"}) {
    SCOPED_TRACE(root);
    KubeletPathFlags f;
    f.kubelet_root = root;
    const HostPaths p = Resolve(f);
    std::string r = root;
    if (r.back() == '/') r.pop_back();
    EXPECT_EQ(p.PluginsRegistryDir(), r + "/plugins_registry");
    EXPECT_EQ(p.PodResourcesSocket(), r + "/pod-resources/kubelet.sock");
    EXPECT_EQ(p.DevicePluginDir(), "/var/lib/kubelet/device-plugins");
    EXPECT_EQ(p.KubeletCheckpoint(), "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint");
  }
}

TEST(HostPathsTest, EachPathHasItsOwnFlag) {
  KubeletPathFlags f;
  f.kubelet_root = "/var/lib/k0s/kubelet";
  f.device_plugin_dir = "/srv/dp/";
  f.plugins_registry_dir = "/srv/reg";
  f.pod_resources_socket = "/srv/pr/kubelet.sock";
  const HostPaths p = Resolve(f);
  EXPECT_EQ(p.DevicePluginDir(), "/srv/dp");
  EXPECT_EQ(p.PluginsRegistryDir(), "/srv/reg");
  EXPECT_EQ(p.PodResourcesSocket(), "/srv/pr/kubelet.sock");
  // One explicit path leaves the others where --kubelet-root puts them.
  KubeletPathFlags g;
  g.kubelet_root = "/var/lib/k0s/kubelet";
  g.pod_resources_socket = "/run/pr.sock";
  const HostPaths q = Resolve(g);
  EXPECT_EQ(q.PodResourcesSocket(), "/run/pr.sock");
  EXPECT_EQ(q.PluginsRegistryDir(), "/var/lib/k0s/kubelet/plugins_registry");
  EXPECT_EQ(q.DevicePluginDir(), "/var/lib/kubelet/device-plugins");
}

TEST(HostPathsTest, RelativePathsAreRefused) {
  HostPaths p = HostPaths::Defaults();
  KubeletPathFlags f;
  f.device_plugin_dir = "var/lib/kubelet/device-plugins";
  absl::Status s = ApplyKubeletPathFlags(f, &p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--device-plugin-dir"), absl::string_view::npos) << s.message();
}

// A fake kubelet tree (tests, kubelet-sim --root DIR) sets only kubelet_root
// and keeps every folder under it, from a bare HostPaths or from Defaults()
// (AgentOptions starts from Defaults(): a test that moved only the root must
// never reach the host's /var/lib/kubelet/device-plugins).
TEST(HostPathsTest, AFakeTreeKeepsEverythingUnderItsRoot) {
  HostPaths bare;
  HostPaths from_defaults = HostPaths::Defaults();
  for (HostPaths* p : {&bare, &from_defaults}) {
    p->kubelet_root = "/tmp/k1";
    EXPECT_EQ(p->DevicePluginDir(), "/tmp/k1/device-plugins");
    EXPECT_EQ(p->PluginsRegistryDir(), "/tmp/k1/plugins_registry");
    EXPECT_EQ(p->PodResourcesSocket(), "/tmp/k1/pod-resources/kubelet.sock");
  }
}

}  // namespace
}  // namespace fabric
