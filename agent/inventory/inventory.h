// Inventory: the owner of the node's device list. It does the first discovery
// and every rediscovery (hot-plug: a change in the class listings), retries a
// failed rediscovery with backoff while keeping the last good list, walks
// again (1 s doubling to 10 s) while a device is skipped for a bad file, and
// publishes node snapshots. It also keeps listing the devices the CNI part
// moved into Pod network namespaces (exclusive RDMA netns mode), which vanish
// from the host's sysfs: the durable attachment records say where they are,
// and the last known description (kept in a state file across restarts) says
// what they are. Health (agent/health) watches the state of the devices it is
// given; it never lists devices.
#ifndef FABRIC_AGENT_INVENTORY_INVENTORY_H_
#define FABRIC_AGENT_INVENTORY_INVENTORY_H_

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/base/host_paths.h"
#include "agent/model/device.h"
#include "agent/sysfs/sysfs_layout.h"

namespace fabric {

// Where the agent records what it moved into Pod network namespaces.
class AttachmentSource {
 public:
  virtual ~AttachmentSource() = default;
  // RDMA device -> the Pod ("namespace/name") whose netns a durable
  // attachment record says it was moved into.
  virtual absl::StatusOr<std::map<std::string, std::string>> MovedDevices() const = 0;
};

struct InventoryOptions {
  // The descriptions of the devices last listed, so that a device sitting in
  // a Pod netns is still described after an agent restart. Empty: not kept.
  std::string state_file;
  // A failed rediscovery is retried after retry_initial, doubling up to retry_max.
  absl::Duration retry_initial = absl::Milliseconds(200);
  absl::Duration retry_max = absl::Seconds(30);
  // A walk that skipped a device (a file of it unreadable or garbage, maybe
  // for a moment) is repeated after skip_retry_initial, doubling up to
  // skip_retry_max, even if the listing did not change: a healed device
  // returns within skip_retry_max.
  absl::Duration skip_retry_initial = absl::Seconds(1);
  absl::Duration skip_retry_max = absl::Seconds(10);
  // The sysfs walk; DiscoverNode unless a test injects faults here.
  std::function<absl::StatusOr<NodeInventory>(const HostPaths&)> walk;
  // GID tables change without any change in the listings (an address added
  // to or removed from a RoCE netdev). Every poll re-reads each port's table
  // up to its highest populated slot + 1, where the kernel puts a new entry
  // (agent/sysfs/gid_table), and every gid_full_scan the whole table. A change is
  // published like a rediscovery, so the next Allocate answers from it.
  absl::Duration gid_full_scan = absl::Seconds(30);
};

class Inventory {
 public:
  using Publish = std::function<void(const NodeInventory& inventory)>;
  // `attachments` may be null (no CNI part); borrowed.
  Inventory(HostPaths paths, InventoryOptions options, const AttachmentSource* attachments);
  ~Inventory();

  // The first discovery, synchronous. Fails only when the walk fails.
  absl::StatusOr<NodeInventory> Discover();
  // Polls the class listings every `interval` on its own thread and publishes
  // every new snapshot.
  void Start(absl::Duration interval, Publish publish);
  void Stop();

  // One poll (cheap unless the listing changed or a retry is due): true when
  // a new snapshot was taken (and published, once Start ran). Public for
  // deterministic tests. `now` is MonotonicNow() (agent/base/mono_clock.h):
  // retry deadlines are durations, which a wall-clock step must not move.
  bool Poll(absl::Time now);

  NodeInventory snapshot() const;
  const SysfsLayout& layout() const { return layout_; }
  // True while the last rediscovery failed and a retry is pending.
  bool retrying() const;
  uint64_t failed_attempts() const;

 private:
  absl::StatusOr<std::vector<std::string>> Listing() const;
  // Walk + devices held in Pod netns. `strict`: an unreadable attachment
  // record is an error (rediscovery) rather than a warning (first discovery).
  absl::StatusOr<NodeInventory> Build(bool strict) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Accept(NodeInventory inv) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a successful walk: schedules the next look when it skipped a device.
  void NoteSkips(const NodeInventory& inv, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A walk after a listing change or for a retry; true when the result is
  // worth publishing.
  bool RediscoverLocked(const absl::StatusOr<std::vector<std::string>>& listing, bool skip_retry,
                        absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-reads the GID tables of the listed devices (see gid_full_scan); true
  // when one changed (current_ is updated).
  bool RefreshGidsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoadState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveState() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HostPaths paths_;
  const SysfsLayout layout_;
  const InventoryOptions options_;
  const AttachmentSource* const attachments_;
  Publish publish_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  NodeInventory current_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> listing_ ABSL_GUARDED_BY(mu_);
  // The description of every device listed (at start: from the state file).
  std::map<std::string, RdmaDevice> known_ ABSL_GUARDED_BY(mu_);
  std::string saved_ ABSL_GUARDED_BY(mu_);
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t failed_attempts_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration backoff_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // The last walk skipped a device: walk again at retry_at_ (skip_backoff_ next).
  bool skipping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration skip_backoff_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  // When the GID tables were last read in full (a walk reads them too).
  absl::Time gid_full_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_INVENTORY_INVENTORY_H_
