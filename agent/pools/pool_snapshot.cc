#include "agent/pools/pool_snapshot.h"

#include "absl/strings/str_cat.h"

namespace fabric {

const PoolUnit* PoolSnapshot::FindUnit(const std::string& id) const {
  auto it = unit_index.find(id);
  return it == unit_index.end() ? nullptr : &units[it->second];
}

size_t PoolSnapshot::HealthyCount() const {
  size_t n = 0;
  for (const PoolUnit& u : units) n += u.healthy ? 1 : 0;
  return n;
}

std::string TokenId(const std::string& device, int index, int tokens_per_device) {
  int width = 1;
  for (int max = tokens_per_device - 1; max >= 10; max /= 10) ++width;
  std::string num = std::to_string(index);
  if (static_cast<int>(num.size()) < width) num.insert(0, width - num.size(), '0');
  return absl::StrCat(device, ".t", num);
}

std::shared_ptr<const PoolSnapshot> BuildSnapshot(const SnapshotInputs& in) {
  auto snap = std::make_shared<PoolSnapshot>();
  snap->resource = in.pool->name;
  snap->mode = in.pool->mode;
  snap->rdma_cm = in.rdma_cm;
  snap->cdi_kind = in.cdi_kind;
  snap->env = in.pool->env;
  for (const RdmaDevice& dev : in.devices) {
    snap->devices[dev.name] = dev;
    auto h = in.health.find(dev.name);
    DeviceHealth health = h == in.health.end() ? DeviceHealth{} : h->second;
    snap->health[dev.name] = health;
    const int tokens = in.pool->mode == PoolMode::kShared ? in.pool->tokens_per_device : 1;
    for (int t = 0; t < tokens; ++t) {
      PoolUnit unit;
      unit.id = in.pool->mode == PoolMode::kShared ? TokenId(dev.name, t, tokens) : dev.name;
      unit.device = dev.name;
      unit.numa_node = dev.numa_node();
      if (auto w = in.withdrawn.find(unit.id); w != in.withdrawn.end()) unit.withdrawn = w->second;
      unit.healthy = health.healthy && unit.withdrawn.empty();
      snap->unit_index[unit.id] = snap->units.size();
      snap->units.push_back(std::move(unit));
    }
  }
  return snap;
}

}  // namespace fabric
