// AttachmentStore: the durable record of what CNI ADD did for one attachment
// (network, container ID, ifname), so DEL and GC can undo it after an agent
// restart. One JSON file per attachment under <state_dir>/cni/, written
// atomically (temp file + rename). The file name encodes the key without
// ambiguity, and the key stored inside decides whether a file is a key's record.
#ifndef FABRIC_AGENT_CNI_SERVICE_ATTACHMENT_STORE_H_
#define FABRIC_AGENT_CNI_SERVICE_ATTACHMENT_STORE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fabric::cni_service {

enum class DeviceAction {
  kAttributed,          // shared netns mode: recorded only
  kMoved,               // moved into the Pod netns
  kNotMovedEfa,         // EFA: cannot change netns
  kNotMovedSharedToken  // shared token: never moved
};

const char* DeviceActionName(DeviceAction a);

struct AttachedDevice {
  std::string container;
  std::string resource;
  std::string device_id;
  std::string rdma_device;
  DeviceAction action = DeviceAction::kAttributed;
  std::string detail;
};

struct AttachmentKey {
  std::string network_name;
  std::string container_id;
  std::string ifname;
};

struct AttachmentRecord {
  AttachmentKey key;
  std::string netns;
  std::string pod_namespace;
  std::string pod_name;
  std::string pod_uid;
  std::string netns_mode;  // "shared" | "exclusive"
  std::vector<AttachedDevice> devices;
  std::vector<std::string> warnings;
  // DEL could not confirm every moved device back in the host netns (Pod
  // netns already gone); GC retries.
  bool release_pending = false;
};

class AttachmentStore {
 public:
  explicit AttachmentStore(std::string dir) : dir_(std::move(dir)) {}

  absl::Status Save(const AttachmentRecord& record);
  // nullopt if there is no record.
  absl::StatusOr<std::optional<AttachmentRecord>> Load(const AttachmentKey& key) const;
  // Missing is fine (idempotent).
  absl::Status Remove(const AttachmentKey& key);
  // Every record; unreadable files are skipped with a log line.
  absl::StatusOr<std::vector<AttachmentRecord>> LoadAll() const;

  const std::string& dir() const { return dir_; }

 private:
  std::string PathFor(const AttachmentKey& key) const;
  // Where the first format put `key` (two keys could share that name).
  std::string LegacyPathFor(const AttachmentKey& key) const;
  // The record at `path` if it is `key`'s; nullopt if missing or another key's.
  absl::StatusOr<std::optional<AttachmentRecord>> LoadPath(const std::string& path,
                                                           const AttachmentKey& key) const;
  std::string dir_;
};

}  // namespace fabric::cni_service

#endif  // FABRIC_AGENT_CNI_SERVICE_ATTACHMENT_STORE_H_
