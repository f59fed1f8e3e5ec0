#include "agent/base/counter_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"

namespace fabric {

DescriptorBudget& DescriptorBudget::Get() {
  static DescriptorBudget* budget = new DescriptorBudget();
  return *budget;
}

DescriptorBudget::DescriptorBudget() {
  struct rlimit rl {};
  int64_t soft = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    if (rl.rlim_cur < rl.rlim_max) {
      // Raising the soft limit to the hard one is always allowed.
      struct rlimit raised = rl;
      raised.rlim_cur = rl.rlim_max == RLIM_INFINITY ? 1048576 : rl.rlim_max;
      if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    soft = rl.rlim_cur == RLIM_INFINITY ? 1048576 : static_cast<int64_t>(rl.rlim_cur);
  }
  constexpr int64_t kReserve = 1024;
  limit_ = std::min<int64_t>(16384, std::max<int64_t>(0, (soft - kReserve) / 2));
}

bool DescriptorBudget::Take() {
  int64_t held = held_.fetch_add(1, std::memory_order_relaxed);
  if (held < limit_) return true;
  held_.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void DescriptorBudget::Give() { held_.fetch_sub(1, std::memory_order_relaxed); }

bool ParseCounterText(absl::string_view text, uint64_t* value) {
  if (text.size() > kMaxCounterText) return false;
  absl::string_view s = absl::StripAsciiWhitespace(text);
  return !s.empty() && s.front() != '-' && absl::SimpleAtoi(s, value);
}

CounterFile::CounterFile(CounterFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      budgeted_(std::exchange(other.budgeted_, false)) {}

CounterFile& CounterFile::operator=(CounterFile&& other) noexcept {
  if (this != &other) {
    Close();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    budgeted_ = std::exchange(other.budgeted_, false);
  }
  return *this;
}

void CounterFile::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (budgeted_) DescriptorBudget::Get().Give();
  budgeted_ = false;
}

absl::StatusOr<uint64_t> CounterFile::Read() {
  int fd = fd_;
  if (fd < 0) {
    fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat(path_, ": cannot open"));
    if (DescriptorBudget::Get().Take()) {
      fd_ = fd;
      budgeted_ = true;
    }
  }
  char buf[kMaxCounterText + 1];  // a full buffer is over-long: refused
  const ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  if (fd != fd_) ::close(fd);  // over budget: not kept
  if (n < 0) {
    Close();
    return absl::UnavailableError(absl::StrCat(path_, ": read failed"));
  }
  uint64_t value;
  if (!ParseCounterText(absl::string_view(buf, static_cast<size_t>(n)), &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": not a counter: ", QuoteContent(absl::string_view(buf, static_cast<size_t>(n)))));
  }
  return value;
}

}  // namespace fabric
