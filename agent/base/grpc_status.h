// The one conversion between absl::Status and grpc::Status. absl and gRPC
// share the canonical code space (OK=0 .. UNAUTHENTICATED=16), so a code keeps
// its meaning both ways: NOT_FOUND stays NOT_FOUND, UNAVAILABLE stays
// UNAVAILABLE. Callers that need a different code decide it explicitly
// before converting, never by a second mapping table.
#ifndef FABRIC_AGENT_BASE_GRPC_STATUS_H_
#define FABRIC_AGENT_BASE_GRPC_STATUS_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace fabric {

// grpc::Status with the same code and message (absl::OkStatus() -> OK).
grpc::Status ToGrpcStatus(const absl::Status& s);

// absl::Status with the same code; the message is "<prefix>: <message>"
// when `prefix` is not empty. A code outside the canonical range is kUnknown.
absl::Status FromGrpcStatus(const grpc::Status& s, absl::string_view prefix = "");

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_GRPC_STATUS_H_
