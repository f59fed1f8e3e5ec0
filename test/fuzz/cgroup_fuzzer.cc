// Bytes the agent reads from other processes' /proc entries and from the
// container runtimes' state: agent/podprocs' ParseProcCgroup
// (/proc/<pid>/cgroup), ParseNetDev (/proc/<pid>/net/dev, a Pod can name its
// interfaces), ParseStatStartTime (/proc/<pid>/stat, comm is any bytes),
// ParseStatusTgid (/proc/<tid>/status, Name is any bytes) and
// ParseRuntimeConfig (OCI config.json annotations, partly from the Pod spec).
// Input: the first byte picks the parser ('n' net/dev, 's' stat, 't' status,
// 'j' containerd config, 'k' CRI-O config) and the rest is its text; any
// other first byte gives the whole input to ParseProcCgroup.
// Invariants:
// - cgroup: only OK, NotFound or InvalidArgument; InvalidArgument for input
//   over 64 KiB; an accepted identity has a valid Pod UID that occurs in the
//   input (as is, or in the systemd '_' form), an empty or 64-hex container ID
//   that occurs in the input, a known runtime (none without a container), and
//   written back as a cgroup line it parses to the same identity;
// - net/dev: only OK or InvalidArgument; names are clean, never "lo", and
//   the sums written back as one line each parse to the same sums;
// - stat: an accepted start time is a decimal run of the input;
// - status: only OK or InvalidArgument; an accepted Tgid is non-zero and a
//   decimal run of the input;
// - config: never throws, only InvalidArgument; accepted names are clean.
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/base/utf8.h"
#include "agent/podprocs/cgroup_path.h"
#include "agent/podprocs/net_dev.h"
#include "agent/podprocs/proc_pod_source.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::podprocs::CgroupIdentity;
using fabric::podprocs::ContainerNames;
using fabric::podprocs::NetBytes;

bool Clean(const std::string& s) { return fabric::CheckExternalName("x", s, 1 << 20).ok(); }

std::string Underscored(std::string s) {
  for (char& c : s) {
    if (c == '-') c = '_';
  }
  return s;
}

// The identity as the systemd driver (or, without a runtime, cgroupfs) writes it.
std::string CgroupLine(const CgroupIdentity& id) {
  if (id.runtime.empty()) {
    return absl::StrCat("0::/kubepods/pod", id.pod_uid, id.container_id.empty() ? "" : "/",
                        id.container_id, "\n");
  }
  const char* prefix = id.runtime == "containerd" ? "cri-containerd-"
                       : id.runtime == "cri-o"    ? "crio-"
                                                  : "docker-";
  return absl::StrCat("0::/kubepods.slice/kubepods-pod", Underscored(id.pod_uid), ".slice/", prefix,
                      id.container_id, ".scope\n");
}

void CheckCgroup(absl::string_view text) {
  absl::StatusOr<CgroupIdentity> id = fabric::podprocs::ParseProcCgroup(text);
  if (text.size() > fabric::podprocs::kMaxCgroupFileBytes) FUZZ_CHECK(!id.ok());
  if (!id.ok()) {
    FUZZ_CHECK(id.status().code() == absl::StatusCode::kNotFound ||
               id.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(fabric::podprocs::IsPodUid(id->pod_uid));
  FUZZ_CHECK(absl::StrContains(text, id->pod_uid) ||
             absl::StrContains(text, Underscored(id->pod_uid)));
  FUZZ_CHECK(id->container_id.empty() || fabric::podprocs::IsContainerId(id->container_id));
  FUZZ_CHECK(absl::StrContains(text, id->container_id));
  FUZZ_CHECK(id->runtime.empty() || id->runtime == "containerd" || id->runtime == "cri-o" ||
             id->runtime == "docker");
  FUZZ_CHECK(!id->container_id.empty() || id->runtime.empty());
  absl::StatusOr<CgroupIdentity> again = fabric::podprocs::ParseProcCgroup(CgroupLine(*id));
  FUZZ_CHECK(again.ok() && *again == *id);
}

void CheckNetDev(absl::string_view text) {
  absl::StatusOr<NetBytes> b = fabric::podprocs::ParseNetDev(text);
  if (!b.ok()) {
    FUZZ_CHECK(b.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  std::string again =
      "Inter-|   Receive                                                |  Transmit\n"
      " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs "
      "drop fifo colls carrier compressed\n";
  for (const std::string& name : b->interfaces) {
    FUZZ_CHECK(!name.empty() && name != "lo" && Clean(name));
  }
  absl::StrAppend(&again, "  eth0:", b->rx_bytes, " 0 0 0 0 0 0 0 ", b->tx_bytes,
                  " 0 0 0 0 0 0 0\n    lo: 7 1 0 0 0 0 0 0 7 1 0 0 0 0 0 0\n");
  absl::StatusOr<NetBytes> re = fabric::podprocs::ParseNetDev(again);
  FUZZ_CHECK(re.ok() && re->rx_bytes == b->rx_bytes && re->tx_bytes == b->tx_bytes);
}

void CheckStat(absl::string_view text) {
  absl::StatusOr<uint64_t> start = fabric::podprocs::ParseStatStartTime(text);
  if (start.ok()) FUZZ_CHECK(absl::StrContains(text, absl::StrCat(*start)));
}

void CheckStatus(absl::string_view text) {
  absl::StatusOr<uint32_t> tgid = fabric::podprocs::ParseStatusTgid(text);
  if (!tgid.ok()) {
    FUZZ_CHECK(tgid.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(*tgid != 0 && absl::StrContains(text, absl::StrCat(*tgid)));
}

void CheckConfig(fabric::podprocs::RuntimeKind kind, absl::string_view text) {
  absl::StatusOr<ContainerNames> n = fabric::podprocs::ParseRuntimeConfig(kind, text);
  if (!n.ok()) {
    FUZZ_CHECK(n.status().code() == absl::StatusCode::kInvalidArgument);
    return;
  }
  FUZZ_CHECK(Clean(n->ns) && Clean(n->pod) && Clean(n->container));
  FUZZ_CHECK(!n->ns.empty() && !n->pod.empty() && fabric::podprocs::IsPodUid(n->pod_uid));
  FUZZ_CHECK(n->sandbox == n->container.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view all(reinterpret_cast<const char*>(data), size);
  const absl::string_view rest = size > 0 ? all.substr(1) : all;
  switch (size > 0 ? data[0] : 0) {
    case 'n':
      CheckNetDev(rest);
      break;
    case 's':
      CheckStat(rest);
      break;
    case 't':
      CheckStatus(rest);
      break;
    case 'j':
      CheckConfig(fabric::podprocs::RuntimeKind::kContainerd, rest);
      break;
    case 'k':
      CheckConfig(fabric::podprocs::RuntimeKind::kCrio, rest);
      break;
    default:
      CheckCgroup(all);
  }
  return 0;
}
