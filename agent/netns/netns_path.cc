#include "agent/netns/netns_path.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/base/errors.h"

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif

namespace fabric::netns {
namespace {

absl::Status NotNetns(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("netns path ", path, " is not a network namespace: ", why));
}

absl::Status CheckNsfs(int fd, const std::string& path) {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return ErrnoError(errno, "statfs", path);
  if (static_cast<unsigned long>(fs.f_type) != NSFS_MAGIC) {
    return NotNetns(path, absl::StrFormat("filesystem type 0x%x, not nsfs",
                                          static_cast<unsigned long>(fs.f_type)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> OpenNetnsFd(const std::string& path) {
  if (path.empty() || path[0] != '/') return NotNetns(path, "not an absolute path");
  // O_PATH opens nothing: a FIFO or device at `path` is neither waited on nor
  // opened. Only an nsfs inode is then opened for real.
  int probe = ::open(path.c_str(), O_PATH | O_CLOEXEC);
  if (probe < 0) return ErrnoError(errno, "open netns", path);
  absl::Status s = CheckNsfs(probe, path);
  struct stat want {};
  if (s.ok() && ::fstat(probe, &want) != 0) s = ErrnoError(errno, "stat", path);
  ::close(probe);
  if (!s.ok()) return s;
  // O_NONBLOCK: if the path was swapped for a FIFO in between, do not wait.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return ErrnoError(errno, "open netns", path);
  struct stat got {};
  s = CheckNsfs(fd, path);
  if (s.ok() && ::fstat(fd, &got) != 0) s = ErrnoError(errno, "stat", path);
  if (s.ok() && (got.st_dev != want.st_dev || got.st_ino != want.st_ino)) {
    s = NotNetns(path, "replaced while being opened");
  }
  if (s.ok()) {
    int type = ::ioctl(fd, NS_GET_NSTYPE);
    // ENOTTY: a kernel before 4.11 cannot tell; setns(CLONE_NEWNET) still checks.
    if (type < 0 && errno != ENOTTY) {
      s = ErrnoError(errno, "NS_GET_NSTYPE", path);
    } else if (type >= 0 && type != CLONE_NEWNET) {
      s = NotNetns(path, absl::StrFormat("a namespace of type 0x%x, not CLONE_NEWNET", type));
    }
  }
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

absl::Status CheckNetnsPath(const std::string& path) {
  auto fd = OpenNetnsFd(path);
  if (!fd.ok()) return fd.status();
  ::close(*fd);
  return absl::OkStatus();
}

}  // namespace fabric::netns
