#include "agent/base/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace fabric {
namespace {

// Both enums list the 17 canonical codes with the same values.
static_assert(static_cast<int>(grpc::StatusCode::NOT_FOUND) ==
              static_cast<int>(absl::StatusCode::kNotFound));
static_assert(static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION) ==
              static_cast<int>(absl::StatusCode::kFailedPrecondition));
static_assert(static_cast<int>(grpc::StatusCode::UNAUTHENTICATED) ==
              static_cast<int>(absl::StatusCode::kUnauthenticated));

constexpr int kLastCanonical = static_cast<int>(absl::StatusCode::kUnauthenticated);

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(s.code());
  return grpc::Status(
      code > kLastCanonical ? grpc::StatusCode::UNKNOWN : static_cast<grpc::StatusCode>(code),
      std::string(s.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view prefix) {
  if (s.ok()) return absl::OkStatus();
  const int code = static_cast<int>(s.error_code());
  return absl::Status(
      code > kLastCanonical ? absl::StatusCode::kUnknown : static_cast<absl::StatusCode>(code),
      prefix.empty() ? s.error_message() : absl::StrCat(prefix, ": ", s.error_message()));
}

}  // namespace fabric
