// Integration: a real CDI consumer (podman 4.3.1 from Debian, OCI runtime runc)
// resolves and injects a spec written by CdiSpecWriter: device node (with a
// hostPath and a leading-digit name, i.e. cdiVersion 0.5.0), env, a spec-level
// common node and the spec-level createRuntime memlock hook.
//
// Stand-in devices: a node mknod'ed in a temp dir with /dev/null's numbers
// (c 1:3) exposed in the container as /dev/fabric-test0, and /dev/zero's
// numbers (c 1:5) as the common node /dev/fabric-test-common. Both are
// harmless, and runc creates them in the container from the numbers.
//
// podman 4.3.1 has no --cdi-spec-dir option, so the spec goes to /var/run/cdi
// (podman's and our default dynamic dir) under a per-process kind, removed at
// the end. Needs root, podman, runc, a static busybox; skips otherwise.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "agent/cdi/cdi_spec_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

#ifndef FABRIC_MEMLOCK_HOOK
#define FABRIC_MEMLOCK_HOOK ""
#endif

namespace fabric::cdi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

CommandResult RunCommand(const std::string& cmd) {
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string StaticBusybox() {
  for (const char* b : {"/bin/busybox", "/usr/bin/busybox"}) {
    if (::access(b, X_OK) == 0 &&
        RunCommand(std::string("ldd ") + b + " >/dev/null 2>&1; echo $?").out != "0\n") {
      return b;  // ldd fails on a static binary
    }
  }
  return "";
}

class PodmanCdiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (podman with runc, mknod)";
    if (RunCommand("command -v podman >/dev/null 2>&1; echo $?").out != "0\n") {
      GTEST_SKIP() << "podman not installed (apt-get install --no-install-recommends podman)";
    }
    busybox_ = StaticBusybox();
    if (busybox_.empty()) GTEST_SKIP() << "no static busybox (apt-get install busybox-static)";

    char tmpl[] = "/tmp/podman_cdi.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    rootfs_ = root_ + "/rootfs";
    for (const char* d : {"/bin", "/proc", "/dev", "/sys", "/etc", "/tmp"}) {
      std::filesystem::create_directories(rootfs_ + d);
    }
    std::filesystem::copy_file(busybox_, rootfs_ + "/bin/busybox");
    for (const char* applet : {"sh", "stat", "awk", "cat", "id"}) {
      std::filesystem::create_symlink("busybox", rootfs_ + "/bin/" + applet);
    }
    std::ofstream(rootfs_ + "/etc/passwd")
        << "root:x:0:0::/:/bin/sh\nuser:x:1000:1000::/:/bin/sh\n";
    std::ofstream(rootfs_ + "/etc/group") << "root:x:0:\nuser:x:1000:\n";
    host_node_ = root_ + "/fabric-test0";
    ASSERT_EQ(::mknod(host_node_.c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << strerror(errno);

    kind_ = "fabric-test.example/podman" + std::to_string(::getpid());
    writer_ = std::make_unique<CdiSpecWriter>(cdi_dir_, root_ + "/state");
  }

  void TearDown() override {
    if (writer_) {
      EXPECT_OK(writer_->RemoveKind(kind_));
    }
    if (!root_.empty()) std::filesystem::remove_all(root_);
  }

  CdiSpecInput Input() const {
    CdiSpecInput in;
    in.kind = kind_;
    CdiDevice dev;
    dev.name = "0000:3b:00.1";  // a PCI address: leading digit (cdiVersion 0.5.0)
    DeviceNode node;
    node.path = "/dev/fabric-test0";
    node.host_path = host_node_;  // differs from path (cdiVersion 0.5.0)
    node.major = 1;
    node.minor = 3;
    dev.nodes.push_back(node);
    dev.env = {"FABRIC_TEST_DEVICES=0000:3b:00.1"};
    in.devices.push_back(dev);
    CdiDevice other;
    other.name = "fabric1";
    DeviceNode other_node = node;
    other_node.path = "/dev/fabric-test1";
    other.nodes.push_back(other_node);
    other.env = {"FABRIC_TEST_OTHER=1"};
    in.devices.push_back(other);
    DeviceNode common;
    common.path = "/dev/fabric-test-common";
    common.major = 1;
    common.minor = 5;
    in.common_nodes.push_back(common);
    return in;
  }

  // Runs `script` in a busybox container; `extra` goes before --rootfs.
  CommandResult Podman(const std::string& extra, const std::string& script,
                       const std::string& prefix = "") {
    // podman's default nofile/nproc ulimits exceed what a root without
    // CAP_SYS_RESOURCE may set; small explicit ones work everywhere.
    std::string cmd = prefix +
                      "podman run --rm --network none --ulimit nofile=1024:1024 "
                      "--ulimit nproc=1024:1024 " +
                      extra + " --rootfs " + rootfs_ + " /bin/sh -c '" + script + "' 2>&1";
    return RunCommand(cmd);
  }

  static constexpr char kProbe[] =
      "echo UID=$(id -u); echo ENV=$FABRIC_TEST_DEVICES OTHER=$FABRIC_TEST_OTHER; "
      "for d in /dev/fabric-test0 /dev/fabric-test1 /dev/fabric-test-common; do "
      "  if [ -c $d ]; then echo NODE $d $(stat -c %t:%T:%a $d); else echo NONODE $d; fi; "
      "done; "
      "if echo probe > /dev/fabric-test0; then echo OPEN=ok; else echo OPEN=fail; fi; "
      "awk \"/Max locked memory/ {print \\\"MEMLOCK=\\\" \\$4 \\\":\\\" \\$5}\" /proc/self/limits";

  std::string busybox_, root_, rootfs_, host_node_, kind_;
  const std::string cdi_dir_ = "/var/run/cdi";
  std::unique_ptr<CdiSpecWriter> writer_;
};

TEST_F(PodmanCdiTest, InjectsNodeEnvAndCommonNode) {
  ASSERT_OK(writer_->Update(Input(), {}));
  std::string spec = RunCommand("cat " + writer_->SpecPath(kind_)).out;
  EXPECT_THAT(spec, HasSubstr("\"cdiVersion\": \"0.5.0\""));

  CommandResult with = Podman("--device " + QualifiedName(kind_, "0000:3b:00.1"), kProbe);
  ASSERT_EQ(with.exit_code, 0) << with.out;
  EXPECT_THAT(with.out, HasSubstr("ENV=0000:3b:00.1 OTHER=\n"));
  EXPECT_THAT(with.out, HasSubstr("NODE /dev/fabric-test0 1:3:666"));
  EXPECT_THAT(with.out, HasSubstr("NONODE /dev/fabric-test1"));  // not requested
  EXPECT_THAT(with.out, HasSubstr("NODE /dev/fabric-test-common 1:5:666"));
  EXPECT_THAT(with.out, HasSubstr("OPEN=ok"));  // device cgroup rule added by CDI

  CommandResult without = Podman("", kProbe);
  ASSERT_EQ(without.exit_code, 0) << without.out;
  EXPECT_THAT(without.out, HasSubstr("NONODE /dev/fabric-test0"));
  EXPECT_THAT(without.out, HasSubstr("NONODE /dev/fabric-test-common"));
  EXPECT_THAT(without.out, HasSubstr("ENV= OTHER="));
}

TEST_F(PodmanCdiTest, NonRootUserCanOpenTheNode) {
  ASSERT_OK(writer_->Update(Input(), {}));
  CommandResult r =
      Podman("--user 1000:1000 --device " + QualifiedName(kind_, "0000:3b:00.1"), kProbe);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("UID=1000"));
  EXPECT_THAT(r.out, HasSubstr("NODE /dev/fabric-test0 1:3:666"));
  EXPECT_THAT(r.out, HasSubstr("OPEN=ok"));
}

TEST_F(PodmanCdiTest, EntryKeptForLiveAllocationStillResolves) {
  ASSERT_OK(writer_->Update(Input(), {}));
  CdiSpecInput later = Input();
  later.devices.erase(later.devices.begin());           // 0000:3b:00.1 left the pool...
  ASSERT_OK(writer_->Update(later, {"0000:3b:00.1"}));  // ...but a Pod still holds it
  CommandResult r = Podman("--device " + QualifiedName(kind_, "0000:3b:00.1"), kProbe);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("NODE /dev/fabric-test0 1:3:666"));

  ASSERT_OK(writer_->Update(later, {}));  // the Pod is gone
  r = Podman("--device " + QualifiedName(kind_, "0000:3b:00.1"), "true");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.out, HasSubstr("unresolvable CDI devices"));
}

// Why specs carry the lowest cdiVersion: podman 4.3.1's CDI library (like
// containerd 1.7.0's v0.5.4) predates 0.6.0 and drops a spec that declares it.
TEST_F(PodmanCdiTest, PreV06LibraryRejectsNewerCdiVersion) {
  absl::StatusOr<std::string> text = RenderSpec(Input());
  ASSERT_OK(text);
  const std::string path = cdi_dir_ + "/" + SpecFileName(kind_);
  for (const std::string version : {"0.5.0", "0.6.0"}) {
    std::string spec = *text;
    size_t at = spec.find("\"0.5.0\"");
    ASSERT_NE(at, std::string::npos);
    spec.replace(at, 7, "\"" + version + "\"");
    std::ofstream(path) << spec;
    CommandResult r = Podman("--device " + QualifiedName(kind_, "0000:3b:00.1"), "true");
    if (version == "0.5.0") {
      EXPECT_EQ(r.exit_code, 0) << r.out;
    } else {
      EXPECT_NE(r.exit_code, 0) << r.out;
      EXPECT_THAT(r.out, HasSubstr("unresolvable CDI devices"));
    }
  }
  std::filesystem::remove(path);
}

TEST_F(PodmanCdiTest, SpecLevelMemlockHookRunsForGrantedContainers) {
  std::string hook = FABRIC_MEMLOCK_HOOK;
  if (hook.empty() || ::access(hook.c_str(), X_OK) != 0) GTEST_SKIP() << "hook binary not built";
  // Our hard limit, capped at 16Mi: raising the soft limit up to it needs no
  // CAP_SYS_RESOURCE, so this runs on hosts whose root lacks it.
  struct rlimit mine;
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &mine), 0);
  rlim_t hard = std::min<rlim_t>(mine.rlim_max, 16 << 20);
  if (hard < 131072) GTEST_SKIP() << "hard RLIMIT_MEMLOCK too small here: " << hard;
  CdiSpecInput in = Input();
  in.memlock_hook = MemlockHook(hook, std::to_string(hard));
  ASSERT_OK(writer_->Update(in, {}));

  // podman, conmon and runc inherit 64Ki soft; no memlock rlimit in the OCI spec.
  std::string prefix = "prlimit --memlock=65536:" + std::to_string(hard) + " ";
  CommandResult with = Podman("--device " + QualifiedName(kind_, "0000:3b:00.1"), kProbe, prefix);
  ASSERT_EQ(with.exit_code, 0) << with.out;
  std::string want = "MEMLOCK=" + std::to_string(hard) + ":" + std::to_string(hard);
  EXPECT_THAT(with.out, HasSubstr(want));

  CommandResult without = Podman("", kProbe, prefix);
  ASSERT_EQ(without.exit_code, 0) << without.out;
  EXPECT_THAT(without.out, HasSubstr("MEMLOCK=65536:" + std::to_string(hard)));
}

}  // namespace
}  // namespace fabric::cdi
