// Small, non-throwing filesystem helpers for sysfs-style trees. Every function
// takes a full path (callers root it with HostPaths) and reports errors as
// absl::Status carrying the path.
#ifndef FABRIC_AGENT_BASE_FILE_UTIL_H_
#define FABRIC_AGENT_BASE_FILE_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabric {

// Whole file contents. kNotFound if missing.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Contents with one trailing newline (and surrounding whitespace) removed.
absl::StatusOr<std::string> ReadTrimmed(const std::string& path);
// A decimal integer file such as numa_node ("-1\n").
absl::StatusOr<int64_t> ReadInt(const std::string& path);
// A decimal unsigned 64-bit counter file.
absl::StatusOr<uint64_t> ReadU64(const std::string& path);
// A hex file such as vendor ("0x1d0f\n").
absl::StatusOr<uint32_t> ReadHex(const std::string& path);
// A "major:minor" file such as class/infiniband_verbs/uverbs0/dev.
absl::StatusOr<std::pair<uint32_t, uint32_t>> ReadDevNumbers(const std::string& path);
// File content quoted for an error message or a log line: at most the first
// 64 bytes, C-escaped (a garbage file cannot break the line), "'abc'" or
// "'abc...' (70000 bytes)".
std::string QuoteContent(absl::string_view content);
// The target of a symlink (not resolved).
absl::StatusOr<std::string> ReadLink(const std::string& path);
// Canonical absolute path (symlinks resolved). kNotFound if missing.
absl::StatusOr<std::string> RealPath(const std::string& path);
// Entry names in a directory (no "." / ".."), in natural order. kNotFound if missing.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path);
// The same in plain byte order: cheaper, for change detection in poll loops.
absl::StatusOr<std::vector<std::string>> ListDirFast(const std::string& path);
// EMFILE, ENFILE, ENOMEM, EAGAIN, EINTR...: the read failed for a reason that
// says nothing about the file's owner (retry), unlike ENOENT or malformed
// content (skip it). Used by every sysfs walk (discovery, the GID tables).
bool IsTransientReadError(const absl::Status& status);
bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
// Last path component ("a/b/c" -> "c").
std::string Basename(const std::string& path);
// Creates `path` and any missing parents (like `mkdir -p`; Go's os.MkdirAll).
// `mode` applies to directories it creates; existing ones are left as they are.
absl::Status MkdirAll(const std::string& path, int mode = 0755);
// Writes a file atomically (temp file in the same directory + rename).
absl::Status WriteFileAtomic(const std::string& path, const std::string& contents, int mode = 0644);
// Compares names so that "uverbs2" < "uverbs10" (numeric runs by value).
bool NaturalLess(const std::string& a, const std::string& b);

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_FILE_UTIL_H_
