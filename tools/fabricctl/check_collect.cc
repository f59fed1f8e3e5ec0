#include "tools/fabricctl/check_collect.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/libfabric/fabric_error.h"
#include "agent/libfabric/libfabric_api.h"
#include "agent/sysfs/sysfs_layout.h"
#include "tools/fabricctl/check_verbs.h"
#include "tools/fabricctl/fid.h"

namespace fabric::fabricctl {
namespace {

std::optional<NodeKind> KindOf(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  if (name == "rdma_cm") return NodeKind::kRdmaCm;
  if (starts("uverbs")) return NodeKind::kUverbs;
  if (starts("umad")) return NodeKind::kUmad;
  if (starts("issm")) return NodeKind::kIssm;
  return std::nullopt;
}

std::optional<uint64_t> Limit(rlim_t v) {
  if (v == RLIM_INFINITY) return std::nullopt;
  return static_cast<uint64_t>(v);
}

}  // namespace

std::vector<DeviceNodeFacts> CollectDeviceNodes(const std::string& dev_root,
                                                const std::string& sysfs_root) {
  std::vector<DeviceNodeFacts> nodes;
  const SysfsLayout layout(sysfs_root);
  auto names = ListDir(dev_root + "/infiniband");
  if (!names.ok()) return nodes;
  std::vector<std::string> sorted = *names;
  std::sort(sorted.begin(), sorted.end(), NaturalLess);
  for (const std::string& name : sorted) {
    std::optional<NodeKind> kind = KindOf(name);
    if (!kind) continue;
    DeviceNodeFacts n;
    n.kind = *kind;
    n.rel_path = "infiniband/" + name;
    n.path = dev_root + "/" + n.rel_path;
    struct stat st {};
    if (::stat(n.path.c_str(), &st) == 0 && S_ISCHR(st.st_mode)) {
      n.is_char_device = true;
      n.major = major(st.st_rdev);
      n.minor = minor(st.st_rdev);
    }
    // Opening issmN sets the IsSM capability bit on the port (and blocks while
    // an SM holds it): a probe must not do that.
    if (n.kind != NodeKind::kIssm) {
      n.probed = true;
      int fd = ::open(n.path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
      if (fd < 0) {
        n.open_errno = errno;
      } else {
        ::close(fd);
      }
    }
    // The sysfs class entry describing the node (for its ibdev and `dev`).
    std::string sys = layout.ClassDirForDevNode(name);
    if (auto ibdev = ReadTrimmed(sys + "/ibdev"); ibdev.ok()) n.ibdev = *ibdev;
    if (auto dev = ReadDevNumbers(sys + "/dev"); dev.ok()) n.sysfs_dev = *dev;
    nodes.push_back(std::move(n));
  }
  return nodes;
}

MemlockFacts CollectMemlock() {
  MemlockFacts m;
  struct rlimit rl {};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    m.soft = Limit(rl.rlim_cur);
    m.hard = Limit(rl.rlim_max);
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) == 0) {
    m.cap_ipc_lock = (data[CAP_IPC_LOCK / 32].effective >> (CAP_IPC_LOCK % 32)) & 1u;
  }
  return m;
}

std::vector<ProviderFacts> CollectProviders(std::string* error) {
  std::vector<ProviderFacts> out;
  if (absl::Status loaded = fi::Load(); !loaded.ok()) {
    *error = std::string(loaded.message());
    return out;
  }
  fi_info* raw = nullptr;
  int ret = fi::GetInfo(kFabricApiVersion, nullptr, nullptr, 0, nullptr, &raw);
  InfoPtr list(raw);
  if (ret != 0) {
    *error = std::string(FabricError(ret, "fi_getinfo").message());
    return out;
  }
  for (fi_info* i = list.get(); i != nullptr; i = i->next) {
    ProviderFacts p;
    if (i->fabric_attr && i->fabric_attr->prov_name) p.provider = i->fabric_attr->prov_name;
    if (i->fabric_attr && i->fabric_attr->name) p.fabric = i->fabric_attr->name;
    if (i->domain_attr && i->domain_attr->name) p.domain = i->domain_attr->name;
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
  }
  return out;
}

GidEnv CollectGidEnv() {
  GidEnv env;
  if (const char* v = std::getenv("MC_GID_INDEX")) env.mc_gid_index = v;
  if (const char* v = std::getenv("NCCL_IB_GID_INDEX")) env.nccl_ib_gid_index = v;
  return env;
}

CheckFacts CollectCheckFacts(const CheckOptions& options) {
  CheckFacts f;
  f.dev_root = options.dev_root;
  f.nodes = CollectDeviceNodes(options.dev_root, options.sysfs_root);
  f.memlock = CollectMemlock();
  f.gid_env = CollectGidEnv();
  FabricRun fabric = CollectFabric(f.nodes, options.dev_root, options.sysfs_root, options.mr_size);
  f.fabric = std::move(fabric.devices);
  f.fabric_skipped = std::move(fabric.skipped_reason);
  f.providers = CollectProviders(&f.provider_error);
  return f;
}

}  // namespace fabric::fabricctl
