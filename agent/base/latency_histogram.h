// A fixed-bucket latency histogram safe for concurrent Observe(): the pools
// count Allocate latency with it and the metrics render it.
#ifndef FABRIC_AGENT_BASE_LATENCY_HISTOGRAM_H_
#define FABRIC_AGENT_BASE_LATENCY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

namespace fabric {

class LatencyHistogram {
 public:
  static constexpr std::array<double, 11> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                     0.01,   0.025,   0.05,   0.1,   1.0};
  void Observe(double seconds);
  struct Snapshot {
    std::array<uint64_t, kBounds.size()> cumulative{};
    uint64_t count = 0;
    double sum = 0;
  };
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size()> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_nanos_{0};
};

}  // namespace fabric

#endif  // FABRIC_AGENT_BASE_LATENCY_HISTOGRAM_H_
