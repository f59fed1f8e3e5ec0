#include "agent/libfabric/fabric_error.h"

#include <rdma/fi_errno.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "agent/libfabric/libfabric_api.h"

namespace fabric {

absl::Status FabricError(int fi_ret, absl::string_view op) {
  int code = fi_ret < 0 ? -fi_ret : fi_ret;
  std::string msg = absl::StrCat(op, ": ", fi::StrError(code), " (-", code, ")");
  switch (code) {
    case FI_ENODATA:
    case FI_ENOENT:
      return absl::NotFoundError(msg);
    case FI_ENOSYS:
    case FI_EOPNOTSUPP:
      return absl::UnimplementedError(msg);
    case FI_EAGAIN:
      return absl::UnavailableError(msg);
    case FI_EINVAL:
      return absl::InvalidArgumentError(msg);
    case FI_EPERM:
    case FI_EACCES:
      return absl::PermissionDeniedError(msg);
    case FI_ETIMEDOUT:
      return absl::DeadlineExceededError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace fabric
