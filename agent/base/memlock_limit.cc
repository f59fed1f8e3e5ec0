#include "agent/base/memlock_limit.h"

#include <cstdint>
#include <limits>

namespace fabric {

bool ParseMemlockLimit(const std::string& text, rlim_t* out, std::string* error) {
  auto fail = [&](std::string why) {
    if (error) *error = std::move(why);
    return false;
  };
  if (text == "unlimited" || text == "infinity" || text == "-1") {
    *out = RLIM_INFINITY;
    return true;
  }
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) {
    return fail("invalid --memlock value \"" + text +
                "\": want unlimited, a byte count, or <n>Ki/Mi/Gi/Ti");
  }
  const std::string suffix = text.substr(digits);
  int shift = 0;
  if (suffix.empty()) {
    shift = 0;
  } else if (suffix == "Ki") {
    shift = 10;
  } else if (suffix == "Mi") {
    shift = 20;
  } else if (suffix == "Gi") {
    shift = 30;
  } else if (suffix == "Ti") {
    shift = 40;
  } else {
    return fail("invalid --memlock suffix \"" + suffix + "\" in \"" + text +
                "\": use Ki, Mi, Gi or Ti (binary units)");
  }
  uint64_t n = 0;
  for (size_t i = 0; i < digits; ++i) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (n > (std::numeric_limits<uint64_t>::max() - d) / 10) {
      return fail("--memlock value \"" + text + "\" overflows 64 bits");
    }
    n = n * 10 + d;
  }
  if (shift > 0 && n > (std::numeric_limits<uint64_t>::max() >> shift)) {
    return fail("--memlock value \"" + text + "\" overflows 64 bits");
  }
  n <<= shift;
  // RLIM_INFINITY is all ones; a byte count equal to it would silently mean
  // "unlimited", so require the word for that.
  if (n == RLIM_INFINITY) return fail("--memlock value \"" + text + "\" is too large");
  *out = static_cast<rlim_t>(n);
  return true;
}

}  // namespace fabric
