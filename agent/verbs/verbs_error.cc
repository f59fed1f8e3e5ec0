#include <cerrno>
#include <cstdlib>

#include "agent/base/errors.h"
#include "agent/verbs/verbs_handles.h"

namespace fabric::verbs {

int VerbsErrno(int ret) {
  if (ret == 0) return 0;
  if (ret == -1) return errno != 0 ? errno : EIO;
  return std::abs(ret);
}

absl::Status VerbsError(int ret, absl::string_view op) {
  const int err = VerbsErrno(ret);
  if (err == 0) return absl::OkStatus();
  return ErrnoError(err, op, "");
}

}  // namespace fabric::verbs
