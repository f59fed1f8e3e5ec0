#include "tools/bench/fake_node.h"

#include "fmt/format.h"

namespace fabric::bench {
namespace {

// splitmix64: deterministic values, so two runs write the same trees.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// 9 to 12 digits: a counter of a device that has carried traffic for days.
uint64_t CounterValue(uint64_t dev, uint64_t counter, uint64_t round) {
  const uint64_t base = 100000000ULL + Mix(dev * 1000003 + counter) % 900000000000ULL;
  return base + round * (1 + Mix(dev * 7 + counter) % 1000000);
}

void WriteAll(testing::FakeSysfs& sysfs, const std::vector<std::string>& devices, uint64_t round) {
  for (size_t d = 0; d < devices.size(); ++d) {
    uint64_t c = 0;
    for (const std::string& name : testing::FakeSysfs::EfaDeviceCounterNames()) {
      sysfs.SetCounter(devices[d], 0, name, CounterValue(d, c++, round));
    }
    for (const std::string& name : testing::FakeSysfs::EfaPortCounterNames()) {
      sysfs.SetCounter(devices[d], 1, name, CounterValue(d, c++, round));
    }
  }
}

}  // namespace

std::vector<std::string> AddEfaDevices(testing::FakeSysfs& sysfs, int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) {
    // Buses 0x10.. as on a p5 (one EFA per PCIe switch function).
    const std::string bdf = fmt::format("0000:{:02x}:00.0", 0x10 + i);
    const std::string name = fmt::format("rdmap{}s0", 0x10 + i);
    testing::EfaOptions o;
    o.numa_node = i < count / 2 ? 0 : 1;
    sysfs.AddEfa(name, bdf, o);
    names.push_back(name);
  }
  WriteAll(sysfs, names, 0);
  return names;
}

void AdvanceEfaCounters(testing::FakeSysfs& sysfs, const std::vector<std::string>& devices,
                        uint64_t round) {
  WriteAll(sysfs, devices, round);
}

}  // namespace fabric::bench
