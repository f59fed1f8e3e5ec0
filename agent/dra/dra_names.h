// DRA device names: every pool unit the node publishes gets a name that is a
// DNS label (the ResourceSlice rule for spec.devices[].name: at most 63 of
// [a-z0-9-], starting and ending alphanumeric), unique within the node's pool,
// and a way back from that name to the pool unit it grants.
//
//   exclusive unit  "mlx5_0"       -> "mlx5-0"
//   shared token    "mlx5_0.t07"   -> "mlx5-0-t07"
//
// A name that would not be a label (too long, or starting/ending with '-'), or
// that two units share (MLX5_0 and mlx5_0, or one device in two pools of the
// same mode), becomes "<shortened label>-<8 hex of a hash of resource and
// ibdev>", keeping a token's "-tNN". Every token of one device gets the same
// treatment. Names depend only on the set of units, not on their order,
// health or withdrawal, so a claim's allocated name keeps meaning the same unit
// while the devices stay the same. Pure functions, no I/O.
#ifndef FABRIC_AGENT_DRA_DRA_NAMES_H_
#define FABRIC_AGENT_DRA_DRA_NAMES_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/pools/pool_snapshot.h"

namespace fabric::dra {

// What one published DRA device grants.
struct PublishedUnit {
  std::string resource;  // the pool: "device.gpustack.ai/rdma.shared"
  std::string ibdev;     // the RDMA device: "mlx5_0"
  std::string unit_id;   // the pool's unit ID: "mlx5_0" or "mlx5_0.t07"
  int token = -1;        // the token index in a shared pool; -1 for a whole device
  bool operator==(const PublishedUnit&) const = default;
};

// "mlx5_0" -> "mlx5-0": lowercased, every byte outside [a-z0-9] as '-'. Not
// necessarily a label yet (length, leading or trailing '-').
std::string LabelOf(std::string_view ibdev);

// True for a DNS label (RFC 1123): 1-63 of [a-z0-9-], alphanumeric at both ends.
bool IsDnsLabel(std::string_view s);

// Every unit of the pools, withdrawn ones included, in pool then unit order;
// a shared pool's token index is read from its unit ID ("<ibdev>.tNN").
std::vector<PublishedUnit> UnitsOf(const std::vector<std::shared_ptr<const PoolSnapshot>>& pools);

class DraNames {
 public:
  DraNames() = default;

  // Names every unit. The same set of units gives the same names in any order;
  // a unit listed twice (same resource and unit ID) is named once.
  static DraNames Assign(std::vector<PublishedUnit> units);
  static DraNames ForPools(const std::vector<std::shared_ptr<const PoolSnapshot>>& pools) {
    return Assign(UnitsOf(pools));
  }

  // The published name of a pool unit; nullptr if it was not named.
  const std::string* NameOf(const std::string& resource, const std::string& unit_id) const;
  // The unit behind a published name (a claim's allocation result); nullptr
  // for a name this node does not publish.
  const PublishedUnit* Lookup(const std::string& name) const;

  const std::map<std::string, PublishedUnit>& by_name() const { return by_name_; }
  size_t size() const { return by_name_.size(); }

 private:
  std::map<std::string, PublishedUnit> by_name_;
  std::map<std::pair<std::string, std::string>, std::string> by_unit_;  // (resource, unit) -> name
};

}  // namespace fabric::dra

#endif  // FABRIC_AGENT_DRA_DRA_NAMES_H_
