#include "agent/base/latency_histogram.h"

namespace fabric {

void LatencyHistogram::Observe(double seconds) {
  for (size_t i = 0; i < kBounds.size(); ++i) {
    if (seconds <= kBounds[i]) {
      buckets_[i].fetch_add(1, std::memory_order_relaxed);
      break;
    }
  }
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_nanos_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot s;
  uint64_t acc = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    acc += buckets_[i].load(std::memory_order_relaxed);
    s.cumulative[i] = acc;
  }
  s.count = count_.load(std::memory_order_relaxed);
  s.sum = static_cast<double>(sum_nanos_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

}  // namespace fabric
