#include "agent/kubeapi/kube_client.h"

namespace fabric::kubeapi {

namespace {

// KEP-5504's shape: digits, no leading zero, not empty (so not "0").
bool ComparableVersion(absl::string_view v) {
  if (v.empty() || v[0] == '0') return false;
  for (char c : v) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::optional<int> CompareResourceVersions(absl::string_view a, absl::string_view b) {
  if (!ComparableVersion(a) || !ComparableVersion(b)) return std::nullopt;
  // Without leading zeros, a longer number is the larger one; the same length
  // compares digit by digit (no overflow, whatever the length).
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

const char* PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
  }
  return "application/merge-patch+json";
}

}  // namespace fabric::kubeapi
