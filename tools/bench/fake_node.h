// Fake nodes the issue-17 cases share: N EFA devices (FakeSysfs) with counter
// values of realistic width, so a /metrics body has the size it has on a
// busy node and not the size of "0\n" files.
#ifndef FABRIC_TOOLS_BENCH_FAKE_NODE_H_
#define FABRIC_TOOLS_BENCH_FAKE_NODE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "test/testing/fake_sysfs.h"

namespace fabric::bench {

// Adds `count` EFA devices (rdmap<bus>s0, half on NUMA 0, half on NUMA 1)
// and writes every device and port counter with a 9-12 digit value (the same
// in every run). Returns the device names in the order added.
std::vector<std::string> AddEfaDevices(testing::FakeSysfs& sysfs, int count);

// Advances every counter of `devices` (as a busy node would between two
// samples); `round` makes each call's values differ.
void AdvanceEfaCounters(testing::FakeSysfs& sysfs, const std::vector<std::string>& devices,
                        uint64_t round);

}  // namespace fabric::bench

#endif  // FABRIC_TOOLS_BENCH_FAKE_NODE_H_
