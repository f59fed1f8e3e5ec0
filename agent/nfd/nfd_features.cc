#include "agent/nfd/nfd_features.h"

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"

namespace fabric::nfd {

std::string RenderFeatures(const NodeInventory& inventory) {
  int efa = 0, rdma = 0;
  for (const RdmaDevice& d : inventory.devices) (d.kind == DeviceKind::kEfa ? efa : rdma)++;
  return absl::StrCat("# written by fabric-agent\n",                              //
                      "fabric-efa.present=", efa > 0 ? "true" : "false", "\n",    //
                      "fabric-efa.count=", efa, "\n",                             //
                      "fabric-rdma.present=", rdma > 0 ? "true" : "false", "\n",  //
                      "fabric-rdma.count=", rdma, "\n");
}

absl::Status WriteFeatures(const std::string& path, const NodeInventory& inventory) {
  const std::string text = RenderFeatures(inventory);
  absl::StatusOr<std::string> old = ReadFile(path);
  if (old.ok() && *old == text) return absl::OkStatus();
  return WriteFileAtomic(path, text);
}

}  // namespace fabric::nfd
