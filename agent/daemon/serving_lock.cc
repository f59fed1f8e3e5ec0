#include "agent/daemon/serving_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "agent/base/file_util.h"
#include "agent/base/utf8.h"

namespace fabric {

ServingLock::~ServingLock() {
  if (fd_ < 0) return;
  // Removed while still locked: whoever waits on this inode sees it is gone.
  if (!path_.empty()) unlink(path_.c_str());
  close(fd_);
}

absl::StatusOr<ServingLock> ServingLock::TryAcquire(const std::string& dir,
                                                    const std::string& front) {
  const std::string path = dir + "/" + kFileName;
  if (absl::Status s = MkdirAll(dir); !s.ok()) return s;
  ServingLock lock;
  for (int attempt = 0;; ++attempt) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::InternalError(absl::StrCat("open ", path, ": ", std::strerror(errno)));
    }
    lock.fd_ = fd;
    lock.path_.clear();  // not ours yet: a failed attempt must not remove the file
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {
        return absl::InternalError(absl::StrCat("flock ", path, ": ", std::strerror(err)));
      }
      char buf[128] = {};
      const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
      std::string holder =
          n > 0 ? std::string(absl::StripAsciiWhitespace(std::string(buf, n))) : "";
      return absl::UnavailableError(
          absl::StrCat("another agent serves this node's devices (", path, " held by ",
                       holder.empty() ? "an unknown process" : SanitizeUtf8(holder),
                       "): one node runs the device-plugin agent or the DRA driver, never both"));
    }
    // The previous holder may have removed the file between our open and
    // flock: the lock is then on a file nobody else will see.
    struct stat by_fd = {}, by_path = {};
    if (fstat(fd, &by_fd) == 0 && stat(path.c_str(), &by_path) == 0 &&
        by_fd.st_dev == by_path.st_dev && by_fd.st_ino == by_path.st_ino) {
      lock.path_ = path;
      break;
    }
    close(fd);
    lock.fd_ = -1;
    if (attempt >= 10) {
      return absl::UnavailableError(absl::StrCat(path, " keeps being replaced"));
    }
  }
  const std::string me = absl::StrCat(getpid(), " ", front, "\n");
  if (ftruncate(lock.fd_, 0) != 0 || pwrite(lock.fd_, me.data(), me.size(), 0) < 0) {
    // The lock holds even if the note cannot be written.
  }
  return lock;
}

}  // namespace fabric
