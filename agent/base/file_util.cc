#include "agent/base/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/base/counter_file.h"
#include "agent/base/errors.h"

namespace fabric {

std::string QuoteContent(absl::string_view content) {
  constexpr size_t kMax = 64;
  if (content.size() <= kMax) return absl::StrCat("'", absl::CHexEscape(content), "'");
  return absl::StrCat("'", absl::CHexEscape(content.substr(0, kMax)), "...' (", content.size(),
                      " bytes)");
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open", path);
  std::string out;
  char buf[4096];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return ErrnoError(e, "read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::StatusOr<std::string> ReadTrimmed(const std::string& path) {
  auto content = ReadFile(path);
  if (!content.ok()) return content.status();
  return std::string(absl::StripAsciiWhitespace(*content));
}

absl::StatusOr<int64_t> ReadInt(const std::string& path) {
  auto s = ReadTrimmed(path);
  if (!s.ok()) return s.status();
  int64_t v;
  if (!absl::SimpleAtoi(*s, &v)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an integer: ", QuoteContent(*s)));
  }
  return v;
}

absl::StatusOr<uint64_t> ReadU64(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return text.status();
  uint64_t v;
  if (!ParseCounterText(*text, &v)) {  // the one counter grammar, CounterFile's too
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a counter: ", QuoteContent(absl::StripAsciiWhitespace(*text))));
  }
  return v;
}

absl::StatusOr<uint32_t> ReadHex(const std::string& path) {
  auto s = ReadTrimmed(path);
  if (!s.ok()) return s.status();
  absl::string_view v = *s;
  if (!absl::ConsumePrefix(&v, "0x")) absl::ConsumePrefix(&v, "0X");
  uint32_t out;
  if (v.empty() || v.size() > 8 || !absl::SimpleHexAtoi(v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a hex number: ", QuoteContent(*s)));
  }
  return out;
}

absl::StatusOr<std::pair<uint32_t, uint32_t>> ReadDevNumbers(const std::string& path) {
  auto s = ReadTrimmed(path);
  if (!s.ok()) return s.status();
  std::vector<absl::string_view> parts = absl::StrSplit(*s, ':');
  uint32_t major, minor;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &major) ||
      !absl::SimpleAtoi(parts[1], &minor)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": expected 'major:minor', got ", QuoteContent(*s)));
  }
  return std::make_pair(major, minor);
}

absl::StatusOr<std::string> ReadLink(const std::string& path) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf) - 1);
  if (n < 0) return ErrnoError(errno, "readlink", path);
  return std::string(buf, static_cast<size_t>(n));
}

absl::StatusOr<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) return ErrnoError(errno, "realpath", path);
  return std::string(buf);
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) {
  auto names = ListDirFast(path);
  if (names.ok()) std::sort(names->begin(), names->end(), NaturalLess);
  return names;
}

absl::StatusOr<std::vector<std::string>> ListDirFast(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return ErrnoError(errno, "opendir", path);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

bool IsTransientReadError(const absl::Status& status) {
  // EMFILE/ENFILE/ENOMEM/ENOSPC map to kResourceExhausted, EAGAIN/EBUSY to
  // kUnavailable, EINTR to kAborted: none says anything about the device.
  switch (status.code()) {
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
      return true;
    default:
      return false;
  }
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string Basename(const std::string& path) {
  std::string_view p = path;
  while (p.size() > 1 && p.back() == '/') p.remove_suffix(1);
  size_t slash = p.rfind('/');
  return std::string(slash == std::string_view::npos ? p : p.substr(slash + 1));
}

absl::Status MkdirAll(const std::string& path, int mode) {
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string cur = path.substr(0, pos);
    if (!cur.empty()) {
      if (::mkdir(cur.c_str(), static_cast<mode_t>(mode)) == 0) {
        // Exactly `mode` for what we create, whatever the umask.
        if (::chmod(cur.c_str(), static_cast<mode_t>(mode)) != 0) {
          return ErrnoError(errno, "chmod", cur);
        }
      } else if (errno != EEXIST) {
        return ErrnoError(errno, "mkdir", cur);
      }
    }
    if (pos == std::string::npos) break;
  }
  if (!IsDirectory(path)) return ErrnoError(ENOTDIR, "mkdir", path);
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& contents, int mode) {
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError(errno, "open", tmp);
  size_t off = 0;
  while (off < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + off, contents.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return ErrnoError(e, "write", tmp);
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return ErrnoError(e, "fsync", tmp);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return ErrnoError(e, "rename", path);
  }
  return absl::OkStatus();
}

bool NaturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) &&
        std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      std::string_view na(a.data() + i, i2 - i), nb(b.data() + j, j2 - j);
      while (na.size() > 1 && na.front() == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb.front() == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return (a.size() - i) < (b.size() - j);
}

}  // namespace fabric
