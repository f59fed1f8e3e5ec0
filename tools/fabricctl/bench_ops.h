// `fabricctl bench`, the data path: RMA operations posted on an Endpoint
// (bench_endpoint.h), one validation round trip, and a timed phase that keeps
// `batch` operations in flight per thread.
#ifndef FABRIC_TOOLS_FABRICCTL_BENCH_OPS_H_
#define FABRIC_TOOLS_FABRICCTL_BENCH_OPS_H_

#include <chrono>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/fabricctl/bench.h"
#include "tools/fabricctl/bench_endpoint.h"

namespace fabric::fabricctl::bench_detail {

using Clock = std::chrono::steady_clock;

// How long outstanding operations may take to complete after the deadline.
constexpr double kDrainTimeoutS = 30;

double Seconds(Clock::duration d);

enum class Op { kWrite, kRead };
const char* OpName(Op op);

// Writes a pattern into the peer's buffer and reads it back, so that the
// numbers describe RMA that really moves data.
absl::Status Validate(Endpoint& e, uint32_t seed);

// One timed phase of `op` on every endpoint (one thread each), o.batch in
// flight per thread for o.duration_s, with per-second progress on stderr.
absl::StatusOr<PhaseResult> RunPhase(std::vector<std::unique_ptr<Endpoint>>& eps, Op op,
                                     const BenchOptions& o);

}  // namespace fabric::fabricctl::bench_detail

#endif  // FABRIC_TOOLS_FABRICCTL_BENCH_OPS_H_
