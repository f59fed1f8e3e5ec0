// gRPC deadlines on the monotonic clock. gRPC turns a
// std::chrono::system_clock deadline into its own time through the wall clock,
// so an NTP step between setting it and the call's end stretches or cuts the
// timeout by the step; a gpr_timespec on GPR_CLOCK_MONOTONIC does not move.
// Use for every ClientContext::set_deadline and Server::Shutdown deadline.
#ifndef FABRIC_AGENT_BASE_GRPC_DEADLINE_H_
#define FABRIC_AGENT_BASE_GRPC_DEADLINE_H_

#include <grpc/support/time.h>

#include <chrono>
#include <cstdint>

#include "absl/time/time.h"

namespace fabric {

// The monotonic instant `timeout` from now, as gRPC takes a deadline.
inline gpr_timespec GrpcDeadlineAfter(std::chrono::nanoseconds timeout) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_nanos(static_cast<int64_t>(timeout.count()), GPR_TIMESPAN));
}

// As above; an infinite `timeout` is no deadline at all.
inline gpr_timespec GrpcDeadlineAfter(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return GrpcDeadlineAfter(std::chrono::nanoseconds(absl::ToInt64Nanoseconds(timeout)));
}

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_GRPC_DEADLINE_H_
