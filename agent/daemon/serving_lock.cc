#include "agent/daemon/serving_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/base/file_util.h"
#include "agent/base/utf8.h"

namespace fabric {

ServingLock::~ServingLock() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<ServingLock> ServingLock::TryAcquire(const std::string& dir,
                                                    const std::string& front) {
  const std::string path = dir + "/" + kFileName;
  if (absl::Status s = MkdirAll(dir); !s.ok()) return s;
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
  }
  ServingLock lock;
  lock.fd_ = fd;
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      return absl::InternalError(absl::StrCat("flock ", path, ": ", std::strerror(err)));
    }
    char buf[128] = {};
    const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    std::string holder = n > 0 ? std::string(absl::StripAsciiWhitespace(std::string(buf, n))) : "";
    return absl::UnavailableError(
        absl::StrCat("another agent serves this node's devices (", path, " held by ",
                     holder.empty() ? "an unknown process" : SanitizeUtf8(holder),
                     "): one node runs the device-plugin agent or the DRA driver, never both"));
  }
  const std::string me = absl::StrCat(getpid(), " ", front, "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, me.data(), me.size(), 0) < 0) {
    // The lock holds even if the note cannot be written.
  }
  return lock;
}

}  // namespace fabric
