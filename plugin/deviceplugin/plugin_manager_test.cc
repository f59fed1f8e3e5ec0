// The one line PluginManager::Start logs about the kubelet's paths.
#include "plugin/deviceplugin/plugin_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "agent/base/logging.h"
#include "test/testing/test_dirs.h"

namespace fabric {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// A unix socket file at `path`, as the kubelet leaves it (bound, not served).
void MakeSocket(const std::string& path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << path;
  ::close(fd);
}

// Every registration line Start logs.
std::vector<std::string> StartAndCapture(const HostPaths& paths, RegistrationMode mode) {
  std::mutex mu;
  std::vector<std::string> lines;
  SetLogSink([&](Component c, LogLevel, std::string_view msg) {
    if (c != Component::kRegistration) return;
    std::lock_guard<std::mutex> lock(mu);
    lines.emplace_back(msg);
  });
  {
    PluginManager m(paths, mode);
    EXPECT_TRUE(m.Start().ok());
    m.Stop();
  }
  SetLogSink(nullptr);
  std::lock_guard<std::mutex> lock(mu);
  return lines;
}

std::vector<std::string> PathLines(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines) {
    if (l.rfind("registration: ", 0) == 0) out.push_back(l);
  }
  return out;
}

// A k0s-shaped node: the kubelet's root is <t>/k0s, its kubelet.sock is in
// <t>/kubelet/device-plugins (hard-coded), plugins_registry/ is under the root,
// and pod-resources/kubelet.sock is not there yet.
struct K0sNode {
  testing::TempDir dir{"pm"};
  HostPaths paths;
  K0sNode() {
    paths.kubelet_root = dir.path() + "/k0s";
    paths.device_plugin_dir = dir.path() + "/kubelet/device-plugins";
    std::filesystem::create_directories(paths.PluginsRegistryDir());
  }
};

TEST(PluginManagerPathsTest, AutoSaysInOneLineWhatItFoundAndWhatItWaitsFor) {
  K0sNode node;
  MakeSocket(node.paths.DevicePluginDir() + "/kubelet.sock");
  auto lines = PathLines(StartAndCapture(node.paths, RegistrationMode::kAuto));
  ASSERT_EQ(lines.size(), 1u);
  const std::string& l = lines[0];
  EXPECT_THAT(l, HasSubstr("registration: kubelet.sock (auto)"));
  EXPECT_THAT(l, HasSubstr("found: kubelet.sock " + node.paths.DevicePluginDir() +
                           "/kubelet.sock, plugins_registry " + node.paths.PluginsRegistryDir()));
  EXPECT_THAT(l, HasSubstr("waiting for: pod-resources " + node.dir.path() +
                           "/k0s/pod-resources/kubelet.sock"));
}

TEST(PluginManagerPathsTest, TheLineNamesWhatIsMissing) {
  K0sNode node;  // no kubelet.sock: auto takes the watcher dir
  MakeSocket(node.paths.PodResourcesSocket());
  auto lines = PathLines(StartAndCapture(node.paths, RegistrationMode::kAuto));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], AllOf(HasSubstr("registration: plugin watcher (auto)"),
                              HasSubstr("found: plugins_registry"),
                              HasSubstr("pod-resources " + node.paths.PodResourcesSocket()),
                              HasSubstr("waiting for: none"),
                              HasSubstr("absent, not needed: kubelet.sock " +
                                        node.paths.DevicePluginDir() + "/kubelet.sock")));

  K0sNode bare;  // nothing of the kubelet's yet: classic mode waits for kubelet.sock
  std::filesystem::remove_all(bare.paths.PluginsRegistryDir());
  lines = PathLines(StartAndCapture(bare.paths, RegistrationMode::kKubelet));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], AllOf(HasSubstr("registration: kubelet.sock (requested); found: none"),
                              HasSubstr("waiting for: kubelet.sock " +
                                        bare.paths.DevicePluginDir() + "/kubelet.sock"),
                              Not(HasSubstr("found: kubelet.sock"))));
}

}  // namespace
}  // namespace fabric
