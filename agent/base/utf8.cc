#include "agent/base/utf8.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace fabric {
namespace {

// Length of the well-formed sequence at s[i], or 0 if it is ill-formed
// (Unicode 15, table 3-7).
size_t SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

}  // namespace

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(absl::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  for (size_t i = 0; i < s.size();) {
    const size_t n = SequenceLength(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

std::string EscapeBytes(absl::string_view s, size_t max_len) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  if (s.size() > max_len) out += "...";
  return out;
}

absl::Status CheckExternalName(absl::string_view what, absl::string_view s, size_t max_len) {
  if (s.size() > max_len) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is ", s.size(), " bytes, longer than ", max_len));
  }
  if (!IsValidUtf8(s)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " \"", EscapeBytes(s), "\" is not valid UTF-8"));
  }
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    // C1 controls are U+0080..U+009F, encoded C2 80..C2 9F.
    const bool c1 = c == 0xC2 && i + 1 < s.size() && static_cast<uint8_t>(s[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7F || c1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " \"", EscapeBytes(s), "\" contains a control character"));
    }
  }
  return absl::OkStatus();
}

}  // namespace fabric
