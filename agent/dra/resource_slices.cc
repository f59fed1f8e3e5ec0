#include "agent/dra/resource_slices.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/base/file_util.h"
#include "agent/base/json_text.h"
#include "agent/base/utf8.h"

namespace fabric::dra {
namespace {

using nlohmann::json;

// The v1 limit on a string attribute's value.
constexpr size_t kMaxStringAttribute = 64;
// Object names are DNS subdomains.
constexpr size_t kMaxObjectName = 253;

int64_t GenerationOf(const json& slice) {
  const json* gen = MemberAt(slice, {"spec", "pool", "generation"});
  if (!gen || !gen->is_number_integer()) return 0;
  return gen->is_number_unsigned() ? static_cast<int64_t>(gen->get<uint64_t>())
                                   : gen->get<int64_t>();
}

class DeviceBuilder {
 public:
  DeviceBuilder(std::string name, std::vector<std::string>* warnings)
      : name_(std::move(name)), warnings_(warnings) {}

  void String(const std::string& key, const std::string& value) {
    if (value.empty()) return;
    std::string text = SanitizeUtf8(value);
    if (text.size() > kMaxStringAttribute) {
      warnings_->push_back(absl::StrCat("DRA device ", name_, ": attribute ", key, " left out (",
                                        text.size(), " bytes, the API allows ", kMaxStringAttribute,
                                        ")"));
      return;
    }
    attributes_[key] = {{"string", std::move(text)}};
  }
  void Int(const std::string& key, int64_t value) { attributes_[key] = {{"int", value}}; }
  void Bool(const std::string& key, bool value) { attributes_[key] = {{"bool", value}}; }

  json Build(json taints) && {
    json device = {{"name", name_}, {"attributes", std::move(attributes_)}};
    if (!taints.empty()) device["taints"] = std::move(taints);
    return device;
  }

 private:
  std::string name_;
  json attributes_ = json::object();
  std::vector<std::string>* warnings_;
};

json DeviceJson(const std::string& name, const PoolSnapshot& pool, const PublishedUnit& unit,
                const RdmaDevice& dev, const DeviceHealth& health, const SliceOptions& options,
                std::vector<std::string>* warnings) {
  DeviceBuilder b(name, warnings);
  b.String("kind", std::string(DeviceKindName(dev.kind)));
  b.String("mode", PoolModeName(pool.mode));
  b.String("resource", pool.resource);
  b.String("rdmaDevice", dev.name);
  b.String("uverbs", Basename(dev.uverbs.rel_path));
  b.String("netdev", dev.PrimaryNetdev());
  b.String("linkLayer", dev.LinkLayer());
  if (!dev.ports.empty()) b.String("portState", dev.ports.front().state);
  if (dev.pci) {
    b.String("pciAddress", dev.pci->address);
    b.String(kPcieRootAttribute, dev.pci->pcie_root);
  }
  if (dev.numa_node() >= 0) b.Int("numaNode", dev.numa_node());
  b.Bool("healthy", health.healthy);
  if (unit.token >= 0) b.Int("token", unit.token);
  json taints = json::array();
  if (options.taint_unhealthy && !health.healthy) {
    taints.push_back({{"key", kUnhealthyTaintKey},
                      {"value", std::string(health.CauseLabel())},
                      {"effect", "NoSchedule"}});
  }
  return std::move(b).Build(std::move(taints));
}

bool OwnedBy(const json& slice, const std::string& driver, const std::string& node) {
  return StringAt(slice, {"spec", "driver"}) == driver &&
         StringAt(slice, {"spec", "nodeName"}) == node;
}

// What of a slice the agent decides: its name and spec, without what the
// server adds (a taint's timeAdded; an empty device list left out) and, for
// the content comparison, without the generation.
json Comparable(const json& slice, bool with_generation) {
  json out = {{"name", StringAt(slice, {"metadata", "name"})}};
  const json* spec_in = MemberAt(slice, {"spec"});
  json spec = spec_in && spec_in->is_object() ? *spec_in : json::object();
  if (!with_generation && spec.contains("pool") && spec["pool"].is_object()) {
    spec["pool"].erase("generation");
  }
  if (!spec.contains("devices") || spec["devices"].is_null()) spec["devices"] = json::array();
  if (spec["devices"].is_array()) {
    for (json& device : spec["devices"]) {
      if (!device.is_object() || !device.contains("taints") || !device["taints"].is_array()) {
        continue;
      }
      for (json& taint : device["taints"]) {
        if (taint.is_object()) taint.erase("timeAdded");
      }
      if (device["taints"].empty()) device.erase("taints");
    }
  }
  out["spec"] = std::move(spec);
  return out;
}

std::map<std::string, json> ComparableByName(const std::vector<json>& slices,
                                             bool with_generation) {
  std::map<std::string, json> out;
  for (const json& s : slices) {
    json c = Comparable(s, with_generation);
    std::string name = c["name"].get<std::string>();
    out[std::move(name)] = std::move(c);
  }
  return out;
}

std::string Hash8(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return absl::StrFormat("%08x", static_cast<uint32_t>(h >> 32));
}

}  // namespace

std::string SliceName(const std::string& node, const std::string& driver, size_t index) {
  const std::string tail = absl::StrCat("-", driver, "-", index);
  if (node.size() + tail.size() <= kMaxObjectName) return node + tail;
  // A subdomain's labels end alphanumeric: trim what the cut leaves behind.
  std::string head = node.substr(0, kMaxObjectName - tail.size() - 9);
  while (!head.empty() && (head.back() == '-' || head.back() == '.')) head.pop_back();
  return absl::StrCat(head, "-", Hash8(node), tail);
}

ResourceSliceSet BuildResourceSlices(const SliceInput& in) {
  ResourceSliceSet out;
  out.names = DraNames::ForPools(in.pools);
  const std::string node = SanitizeUtf8(in.node_name);
  const std::string driver = SanitizeUtf8(in.driver_name);

  std::vector<std::pair<std::string, json>> devices;
  for (const auto& pool : in.pools) {
    if (!pool) continue;
    for (const PublishedUnit& unit : UnitsOf({pool})) {
      const PoolUnit* pool_unit = pool->FindUnit(unit.unit_id);
      // The exclusive/shared rule: a unit withdrawn while its device is held
      // through the other pool mode is not offered at all.
      if (!pool_unit || !pool_unit->withdrawn.empty()) continue;
      auto dev = pool->devices.find(unit.ibdev);
      const std::string* name = out.names.NameOf(unit.resource, unit.unit_id);
      if (dev == pool->devices.end() || !name) continue;
      auto h = pool->health.find(unit.ibdev);
      const DeviceHealth health = h == pool->health.end() ? DeviceHealth{} : h->second;
      devices.emplace_back(
          *name, DeviceJson(*name, *pool, unit, dev->second, health, in.options, &out.warnings));
    }
  }
  std::sort(devices.begin(), devices.end(), [](const auto& a, const auto& b) {
    if (NaturalLess(a.first, b.first)) return true;
    if (NaturalLess(b.first, a.first)) return false;
    return a.first < b.first;
  });
  out.device_count = devices.size();

  const size_t per_slice =
      std::clamp<size_t>(in.options.max_devices_per_slice, 1, kMaxDevicesPerSlice);
  const size_t count = std::max<size_t>(1, (devices.size() + per_slice - 1) / per_slice);
  for (size_t i = 0; i < count; ++i) {
    json list = json::array();
    for (size_t d = i * per_slice; d < std::min(devices.size(), (i + 1) * per_slice); ++d) {
      list.push_back(std::move(devices[d].second));
    }
    out.slices.push_back({
        {"apiVersion", kResourceApiVersion},
        {"kind", "ResourceSlice"},
        {"metadata", {{"name", SliceName(node, driver, i)}}},
        {"spec",
         {{"driver", driver},
          {"nodeName", node},
          {"pool", {{"name", node}, {"generation", 0}, {"resourceSliceCount", count}}},
          {"devices", std::move(list)}}},
    });
  }
  out.generation = NextPoolGeneration(in.published, out.slices);
  for (json& slice : out.slices) slice["spec"]["pool"]["generation"] = out.generation;
  return out;
}

bool SameSliceContent(const std::vector<json>& a, const std::vector<json>& b) {
  return ComparableByName(a, false) == ComparableByName(b, false);
}

int64_t NextPoolGeneration(const std::vector<json>& published, const std::vector<json>& desired) {
  if (desired.empty()) return 1;
  const std::string driver = StringAt(desired.front(), {"spec", "driver"});
  const std::string node = StringAt(desired.front(), {"spec", "nodeName"});
  const std::string pool = StringAt(desired.front(), {"spec", "pool", "name"});
  std::vector<json> mine;
  int64_t highest = 0;
  for (const json& s : published) {
    if (!OwnedBy(s, driver, node) || StringAt(s, {"spec", "pool", "name"}) != pool) continue;
    mine.push_back(s);
    highest = std::max(highest, GenerationOf(s));
  }
  if (mine.empty()) return 1;
  if (highest >= 1 && SameSliceContent(mine, desired)) return highest;
  return highest + 1;
}

SliceDiff DiffSlices(const std::vector<json>& desired, const std::vector<json>& listed,
                     const std::string& driver, const std::string& node) {
  std::map<std::string, const json*> mine;
  for (const json& s : listed) {
    const std::string name = StringAt(s, {"metadata", "name"});
    if (!name.empty() && OwnedBy(s, driver, node)) mine[name] = &s;
  }
  SliceDiff diff;
  std::map<std::string, bool> wanted;
  for (const json& d : desired) {
    const std::string name = StringAt(d, {"metadata", "name"});
    wanted[name] = true;
    auto it = mine.find(name);
    if (it == mine.end()) {
      diff.create.push_back(d);
      continue;
    }
    const json& have = *it->second;
    bool same = Comparable(d, true) == Comparable(have, true);
    // Metadata the agent sets (the caller's ownerReferences, labels) must
    // match too; everything else there belongs to the server.
    for (const char* key : {"labels", "ownerReferences"}) {
      const json* want = MemberAt(d, {"metadata", key});
      if (!want) continue;
      const json* got = MemberAt(have, {"metadata", key});
      same &= got != nullptr && *got == *want;
    }
    if (same) continue;
    json update = d;
    const std::string version = StringAt(have, {"metadata", "resourceVersion"});
    if (!version.empty()) update["metadata"]["resourceVersion"] = version;
    diff.update.push_back(std::move(update));
  }
  for (const auto& [name, slice] : mine) {
    if (!wanted.count(name)) diff.remove.push_back(name);
  }
  return diff;
}

}  // namespace fabric::dra
