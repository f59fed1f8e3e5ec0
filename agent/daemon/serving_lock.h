// One front per node: fabric-agent (device plugin) and fabric-dra (DRA) take
// the same lock file before they serve anything, so a
// node never advertises a device through both paths at once (AWS warns that
// its two EFA drivers installed side by side silently oversubscribe). The
// kernel drops the lock when the holder exits, however it exits. The file
// lives in the kubelet's plugins_registry folder, the one host folder both
// modes mount (the chart keeps the state folder per Pod); the kubelet's
// plugin watcher ignores files whose name starts with a dot.
#ifndef FABRIC_AGENT_DAEMON_SERVING_LOCK_H_
#define FABRIC_AGENT_DAEMON_SERVING_LOCK_H_

#include <string>

#include "absl/status/statusor.h"

namespace fabric {

class ServingLock {
 public:
  ServingLock() = default;
  ~ServingLock();
  ServingLock(ServingLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  ServingLock& operator=(ServingLock&&) = delete;

  static constexpr char kFileName[] = ".fabric.gpustack.ai-serving.lock";
  // Takes <dir>/<kFileName> and writes "<pid> <front>" into it. The holder
  // removes the file when it lets go (uninstalling leaves nothing behind); a
  // waiter that locked a file already removed tries again on the new one.
  // kUnavailable names the holder when another process has it; other errors
  // name the file.
  static absl::StatusOr<ServingLock> TryAcquire(const std::string& dir, const std::string& front);

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_DAEMON_SERVING_LOCK_H_
