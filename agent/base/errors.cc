#include "agent/base/errors.h"

#include "absl/strings/str_cat.h"

namespace fabric {

absl::Status ErrnoError(int errno_value, absl::string_view op, absl::string_view path) {
  return absl::ErrnoToStatus(errno_value, absl::StrCat(op, " ", path));
}

}  // namespace fabric
