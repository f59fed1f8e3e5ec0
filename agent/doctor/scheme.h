// Which peers a node probes in each period: a bounded sample, not a full mesh.
//
// The ring is every participating node sorted by control address (the same
// order on every node); `self` is our index, M = n - 1 peers. In period t,
// local device d (of D) probes:
//   - its fixed partner: the next node on the ring, device index d ("same index");
//   - K rotating samples j = 0..K-1: ring offset 1 + ((t*K + j + d*ceil(M/D)) mod M),
//     on peer device index d + floor((t*K + j) / M) (mod the peer's device count).
// Devices start a stride ceil(M/D) apart and advance K per period, so
//   - every node pair is probed within ceil(ceil(M/D)/K) periods,
//   - every (local device, peer node) within ceil(M/K) periods,
//   - every (local device, peer node, peer device) within Dp*ceil(M/K)+1 periods,
// at D*(K+1) probes per node per period whatever n is (scheme_test checks these).
#ifndef FABRIC_AGENT_DOCTOR_SCHEME_H_
#define FABRIC_AGENT_DOCTOR_SCHEME_H_

#include <cstdint>
#include <vector>

namespace fabric::doctor {

struct ProbeTarget {
  int node = 0;          // ring index, never `self`
  int device_index = 0;  // index into the peer's device list, taken modulo its size
  bool fixed = false;    // the "same index" partner
  bool operator==(const ProbeTarget&) const = default;
};

// Targets of local device `device` (of `devices`) in period `period`; no
// duplicates. Empty when the ring has no other node.
std::vector<ProbeTarget> TargetsFor(int n, int self, int device, int devices, uint64_t period,
                                    int sample);

}  // namespace fabric::doctor

#endif  // FABRIC_AGENT_DOCTOR_SCHEME_H_
