// The clock for every duration the agent measures (grant TTLs, settle windows,
// caches, deadlines): steady, so an NTP step neither freezes nor fires them.
// Its epoch is arbitrary; never show its values to a human as a date.
#ifndef FABRIC_AGENT_BASE_MONO_CLOCK_H_
#define FABRIC_AGENT_BASE_MONO_CLOCK_H_

#include <chrono>

#include "absl/time/time.h"

namespace fabric {

inline absl::Time MonotonicNow() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_MONO_CLOCK_H_
