#include "agent/podprocs/cgroup_path.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/base/utf8.h"

namespace fabric::podprocs {
namespace {

bool IsLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool AllLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!IsLowerHex(c)) return false;
  }
  return true;
}

// What a cgroup path segment says about the Pod.
struct PodSegment {
  std::string uid;
  // runc's systemd fallback form carries the container in the same segment
  // ("<pod slice>:cri-containerd:<id>").
  std::optional<CgroupIdentity> container;
};

// "kubepods-burstable-pod0a1b2c3d_..._.slice" (systemd driver; the UID's
// dashes are underscores because '-' separates slice levels) or
// "pod0a1b2c3d-..." (cgroupfs driver).
std::optional<std::string> PodUidOfSegment(absl::string_view seg) {
  if (absl::ConsumeSuffix(&seg, ".slice")) {
    const size_t dash = seg.rfind('-');
    if (dash == absl::string_view::npos) return std::nullopt;
    // The kubelet names every Pod slice under <cgroup-root>/kubepods.
    if (!absl::StrContains(seg.substr(0, dash), "kubepods")) return std::nullopt;
    absl::string_view last = seg.substr(dash + 1);
    if (!absl::ConsumePrefix(&last, "pod")) return std::nullopt;
    std::string uid(last);
    for (char& c : uid) {
      if (c == '_') c = '-';
    }
    if (!IsPodUid(uid)) return std::nullopt;
    return uid;
  }
  if (absl::ConsumePrefix(&seg, "pod") && IsPodUid(seg)) return std::string(seg);
  return std::nullopt;
}

enum class ContainerKind { kNone, kContainer, kConmon };

// "cri-containerd-<id>.scope", "crio-<id>.scope", "docker-<id>.scope",
// "crio-conmon-<id>.scope"; cgroupfs: "<id>", "crio-<id>", "crio-conmon-<id>".
ContainerKind ContainerOfSegment(absl::string_view seg, CgroupIdentity* out) {
  const bool scope = absl::ConsumeSuffix(&seg, ".scope");
  if (absl::ConsumePrefix(&seg, "crio-conmon-")) {
    return IsContainerId(seg) ? ContainerKind::kConmon : ContainerKind::kNone;
  }
  std::string runtime;
  if (absl::ConsumePrefix(&seg, "crio-")) {
    runtime = "cri-o";
  } else if (scope && absl::ConsumePrefix(&seg, "cri-containerd-")) {
    runtime = "containerd";
  } else if (scope && absl::ConsumePrefix(&seg, "docker-")) {
    runtime = "docker";
  } else if (scope) {
    return ContainerKind::kNone;  // some other systemd unit
  }
  // A bare ID (cgroupfs): containerd and Docker name it the same way.
  if (!IsContainerId(seg)) return ContainerKind::kNone;
  out->container_id = std::string(seg);
  out->runtime = runtime;
  return ContainerKind::kContainer;
}

// "kubepods-besteffort-pod<uid>.slice:cri-containerd:<id>".
std::optional<PodSegment> ParseColonSegment(absl::string_view seg) {
  std::vector<absl::string_view> parts = absl::StrSplit(seg, ':');
  if (parts.size() != 3) return std::nullopt;
  std::optional<std::string> uid = PodUidOfSegment(parts[0]);
  if (!uid || !IsContainerId(parts[2])) return std::nullopt;
  CgroupIdentity id;
  id.pod_uid = *uid;
  id.container_id = std::string(parts[2]);
  if (parts[1] == "cri-containerd") {
    id.runtime = "containerd";
  } else if (parts[1] == "crio") {
    id.runtime = "cri-o";
  } else if (parts[1] == "docker") {
    id.runtime = "docker";
  } else {
    return std::nullopt;
  }
  return PodSegment{*uid, id};
}

std::optional<PodSegment> ParsePodSegment(absl::string_view seg) {
  if (absl::StrContains(seg, ':')) return ParseColonSegment(seg);
  std::optional<std::string> uid = PodUidOfSegment(seg);
  if (!uid) return std::nullopt;
  return PodSegment{*uid, std::nullopt};
}

// Lower is preferred: the controllers every Kubernetes cgroup v1 setup
// mounts and places containers in, then the unified line of a hybrid host.
int ControllerRank(absl::string_view hierarchy, absl::string_view controllers) {
  if (controllers.empty()) return hierarchy == "0" ? 4 : 5;
  int best = 5;
  for (absl::string_view c : absl::StrSplit(controllers, ',')) {
    if (c == "pids") best = std::min(best, 0);
    if (c == "memory") best = std::min(best, 1);
    if (c == "cpu") best = std::min(best, 2);
    if (c == "name=systemd") best = std::min(best, 3);
  }
  return best;
}

bool IsControllerChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == ',' || c == '=' || c == '.' || c == '-';
}

}  // namespace

bool IsPodUid(absl::string_view s) {
  if (s.size() == 32) return AllLowerHex(s);  // a static Pod: md5 of its manifest
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash_here = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_here ? s[i] != '-' : !IsLowerHex(s[i])) return false;
  }
  return true;
}

bool IsContainerId(absl::string_view s) { return s.size() == 64 && AllLowerHex(s); }

absl::StatusOr<CgroupIdentity> ParseCgroupPath(absl::string_view path) {
  std::vector<absl::string_view> segs;
  for (absl::string_view seg : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (seg == "." || seg == "..") continue;  // relative to the reader's cgroup namespace
    segs.push_back(seg);
  }
  for (size_t i = 0; i < segs.size(); ++i) {
    std::optional<PodSegment> pod = ParsePodSegment(segs[i]);
    if (!pod) continue;
    if (pod->container) return *pod->container;
    CgroupIdentity id;
    id.pod_uid = pod->uid;
    if (i + 1 == segs.size()) return id;  // the Pod's own cgroup
    switch (ContainerOfSegment(segs[i + 1], &id)) {
      case ContainerKind::kContainer:
        return id;  // deeper segments are the container's own children
      case ContainerKind::kConmon:
        return absl::NotFoundError("a CRI-O conmon process (the runtime's, not the Pod's)");
      case ContainerKind::kNone:
        return absl::NotFoundError(
            absl::StrCat("no container under the Pod's cgroup: '", EscapeBytes(segs[i + 1]), "'"));
    }
  }
  return absl::NotFoundError("not in a Pod's cgroup");
}

absl::StatusOr<CgroupIdentity> ParseProcCgroup(absl::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("empty cgroup file");
  if (text.size() > kMaxCgroupFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("cgroup file of ", text.size(), " bytes (over ", kMaxCgroupFileBytes, ")"));
  }
  if (text.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError("NUL byte in cgroup file");
  }
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("cgroup file is not UTF-8");
  if (text.back() == '\n') text.remove_suffix(1);

  std::optional<CgroupIdentity> best;
  int best_rank = 1 << 30;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    // "<hierarchy-ID>:<controller-list>:<cgroup-path>"; the path may itself
    // hold ':' (runc's systemd fallback form), so split twice only.
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == absl::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cgroup line ", line_no, " is not <id>:<controllers>:<path>: '", EscapeBytes(line), "'"));
    }
    const absl::string_view hierarchy = line.substr(0, c1);
    const absl::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const absl::string_view path = line.substr(c2 + 1);
    bool ok = !hierarchy.empty() && hierarchy.size() <= 10 && !path.empty() && path[0] == '/';
    for (char c : hierarchy) ok = ok && c >= '0' && c <= '9';
    for (char c : controllers) ok = ok && IsControllerChar(c);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("cgroup line ", line_no, " is malformed: '", EscapeBytes(line), "'"));
    }
    absl::StatusOr<CgroupIdentity> id = ParseCgroupPath(path);
    if (!id.ok()) continue;
    const int rank = ControllerRank(hierarchy, controllers);
    if (rank < best_rank) {
      best_rank = rank;
      best = *std::move(id);
    }
  }
  if (!best) return absl::NotFoundError("not in a Pod's cgroup");
  return *best;
}

}  // namespace fabric::podprocs
