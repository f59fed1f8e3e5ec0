#include "agent/inventory/cni_attachments.h"

#include "absl/strings/str_cat.h"
#include "agent/cni_service/attachment_store.h"

namespace fabric {

absl::StatusOr<std::map<std::string, std::string>> CniAttachmentRecords::MovedDevices() const {
  cni_service::AttachmentStore store(dir_);
  auto records = store.LoadAll();
  if (!records.ok()) return records.status();
  std::map<std::string, std::string> out;
  for (const auto& rec : *records) {
    for (const auto& d : rec.devices) {
      if (d.action != cni_service::DeviceAction::kMoved) continue;
      out[d.rdma_device] = absl::StrCat(rec.pod_namespace, "/", rec.pod_name);
    }
  }
  return out;
}

}  // namespace fabric
