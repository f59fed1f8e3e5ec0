// CniAttachmentRecords: the AttachmentSource read from the CNI service's
// durable attachment records (<state_dir>/cni, agent/cni_service).
#ifndef FABRIC_AGENT_INVENTORY_CNI_ATTACHMENTS_H_
#define FABRIC_AGENT_INVENTORY_CNI_ATTACHMENTS_H_

#include <string>

#include "agent/inventory/inventory.h"

namespace fabric {

class CniAttachmentRecords : public AttachmentSource {
 public:
  // `dir`: <state_dir>/cni. A missing directory is no attachment.
  explicit CniAttachmentRecords(std::string dir) : dir_(std::move(dir)) {}
  // Every device a record says was moved into a Pod netns, including records
  // whose release is pending (the device is not confirmed back yet).
  absl::StatusOr<std::map<std::string, std::string>> MovedDevices() const override;

 private:
  std::string dir_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_INVENTORY_CNI_ATTACHMENTS_H_
