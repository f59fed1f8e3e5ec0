// A file descriptor, owned and closed once: the agent's one RAII for a raw
// descriptor (sockets, /proc files, network namespace handles).
#ifndef FABRIC_AGENT_BASE_UNIQUE_FD_H_
#define FABRIC_AGENT_BASE_UNIQUE_FD_H_

#include <unistd.h>

#include <utility>

namespace fabric {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_UNIQUE_FD_H_
