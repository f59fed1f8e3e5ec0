#include "agent/doctor/scheme.h"

#include <algorithm>

namespace fabric::doctor {

std::vector<ProbeTarget> TargetsFor(int n, int self, int device, int devices, uint64_t period,
                                    int sample) {
  std::vector<ProbeTarget> out;
  if (n <= 1 || self < 0 || self >= n || devices <= 0) return out;
  const uint64_t m = static_cast<uint64_t>(n - 1);
  auto add = [&](ProbeTarget t) {
    for (const ProbeTarget& o : out) {
      if (o.node == t.node && o.device_index == t.device_index) return;
    }
    out.push_back(t);
  };
  add({(self + 1) % n, device, true});
  const uint64_t stride = (m + static_cast<uint64_t>(devices) - 1) / static_cast<uint64_t>(devices);
  for (int j = 0; j < sample; ++j) {
    uint64_t s = period * static_cast<uint64_t>(sample) + static_cast<uint64_t>(j);
    uint64_t offset = 1 + (s + static_cast<uint64_t>(device) * stride) % m;
    uint64_t pass = s / m;
    add({static_cast<int>((static_cast<uint64_t>(self) + offset) % static_cast<uint64_t>(n)),
         static_cast<int>((static_cast<uint64_t>(device) + pass) % (1 << 20)), false});
  }
  return out;
}

}  // namespace fabric::doctor
