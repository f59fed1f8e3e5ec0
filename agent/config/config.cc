#include "agent/config/config.h"

#include <fnmatch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "agent/base/file_util.h"
#include "agent/base/status_macros.h"

namespace fabric {
namespace {

bool IsCounterFileName(const std::string& name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status KeyError(const std::string& source, const std::string& key, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", key, ": ", what));
}

// A key given twice in one mapping: yaml-cpp keeps both entries and
// node[key] reads the first, so the second would be silently ignored.
absl::Status DuplicateKey(const std::string& source, const std::string& path) {
  return KeyError(source, path, "duplicate key");
}

// Rejects keys not in `known`, naming the first unknown one, and keys given
// twice.
absl::Status CheckKeys(const YAML::Node& map, const std::set<std::string>& known,
                       const std::string& source, const std::string& where) {
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    std::string key = it->first.as<std::string>();
    const std::string path = where.empty() ? key : absl::StrCat(where, ".", key);
    if (!known.count(key)) {
      return KeyError(source, path,
                      absl::StrCat("unknown key (known keys: ", absl::StrJoin(known, ", "), ")"));
    }
    if (!seen.insert(key).second) return DuplicateKey(source, path);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> StringList(const YAML::Node& node,
                                                    const std::string& source,
                                                    const std::string& key) {
  std::vector<std::string> out;
  if (node.IsScalar()) {
    out.push_back(node.as<std::string>());
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      if (!item.IsScalar()) return KeyError(source, key, "expected a list of strings");
      out.push_back(item.as<std::string>());
    }
  } else {
    return KeyError(source, key, "expected a string or a list of strings");
  }
  return out;
}

absl::StatusOr<std::vector<uint32_t>> HexList(const YAML::Node& node, const std::string& source,
                                              const std::string& key) {
  FABRIC_ASSIGN_OR_RETURN(std::vector<std::string> items, StringList(node, source, key));
  std::vector<uint32_t> out;
  for (const std::string& item : items) {
    absl::string_view v = item;
    if (!absl::ConsumePrefix(&v, "0x")) absl::ConsumePrefix(&v, "0X");
    uint32_t value;
    if (v.empty() || v.size() > 8 || !absl::SimpleHexAtoi(v, &value)) {
      return KeyError(source, key, absl::StrCat("'", item, "' is not a hex id such as 0x1d0f"));
    }
    out.push_back(value);
  }
  return out;
}

absl::StatusOr<bool> Bool(const YAML::Node& node, const std::string& source,
                          const std::string& key) {
  std::string v = node.IsScalar() ? node.as<std::string>() : "";
  if (v == "true") return true;
  if (v == "false") return false;
  return KeyError(source, key, absl::StrCat("expected true or false, got '", v, "'"));
}

absl::StatusOr<int64_t> Int(const YAML::Node& node, const std::string& source,
                            const std::string& key, int64_t min, int64_t max) {
  int64_t v;
  if (!node.IsScalar() || !absl::SimpleAtoi(node.as<std::string>(), &v)) {
    return KeyError(source, key, "expected an integer");
  }
  if (v < min || v > max) {
    return KeyError(source, key, absl::StrCat(v, " is out of range [", min, ", ", max, "]"));
  }
  return v;
}

absl::Status CheckGlobs(const std::vector<std::string>& globs, const std::string& source,
                        const std::string& key) {
  for (const std::string& g : globs) {
    if (g.empty()) return KeyError(source, key, "empty pattern");
    // fnmatch has no compile step; an unbalanced '[' is the one way to be malformed.
    size_t open = g.find('[');
    if (open != std::string::npos && g.find(']', open + 1) == std::string::npos) {
      return KeyError(source, key, absl::StrCat("pattern '", g, "' has an unclosed '['"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Selector> ParseSelector(const YAML::Node& node, const std::string& source,
                                       const std::string& where) {
  Selector sel;
  if (!node.IsMap()) return KeyError(source, where, "expected a mapping");
  FABRIC_RETURN_IF_ERROR(CheckKeys(node,
                                   {"kinds", "vendors", "deviceIDs", "drivers", "ibdevNames",
                                    "netdevNames", "linkTypes", "pciAddresses", "isVF", "hasVFs"},
                                   source, where));
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    const std::string path = absl::StrCat(where, ".", key);
    // A copy: yaml-cpp iterators yield temporaries, a reference would dangle.
    const YAML::Node v = it->second;
    if (key == "kinds") {
      FABRIC_ASSIGN_OR_RETURN(auto kinds, StringList(v, source, path));
      for (const std::string& k : kinds) {
        if (k == "efa")
          sel.kinds.push_back(DeviceKind::kEfa);
        else if (k == "rdma")
          sel.kinds.push_back(DeviceKind::kRdma);
        else
          return KeyError(source, path, absl::StrCat("'", k, "' is not efa or rdma"));
      }
    } else if (key == "vendors") {
      FABRIC_ASSIGN_OR_RETURN(sel.vendors, HexList(v, source, path));
    } else if (key == "deviceIDs") {
      FABRIC_ASSIGN_OR_RETURN(sel.device_ids, HexList(v, source, path));
    } else if (key == "drivers") {
      FABRIC_ASSIGN_OR_RETURN(sel.drivers, StringList(v, source, path));
    } else if (key == "ibdevNames") {
      FABRIC_ASSIGN_OR_RETURN(sel.ibdev_names, StringList(v, source, path));
      FABRIC_RETURN_IF_ERROR(CheckGlobs(sel.ibdev_names, source, path));
    } else if (key == "netdevNames") {
      FABRIC_ASSIGN_OR_RETURN(sel.netdev_names, StringList(v, source, path));
      FABRIC_RETURN_IF_ERROR(CheckGlobs(sel.netdev_names, source, path));
    } else if (key == "pciAddresses") {
      FABRIC_ASSIGN_OR_RETURN(sel.pci_addresses, StringList(v, source, path));
      FABRIC_RETURN_IF_ERROR(CheckGlobs(sel.pci_addresses, source, path));
    } else if (key == "linkTypes") {
      FABRIC_ASSIGN_OR_RETURN(sel.link_types, StringList(v, source, path));
      for (const std::string& lt : sel.link_types) {
        if (lt != "InfiniBand" && lt != "Ethernet" && lt != "Unknown") {
          return KeyError(source, path,
                          absl::StrCat("'", lt, "' is not InfiniBand, Ethernet or Unknown"));
        }
      }
    } else if (key == "isVF") {
      FABRIC_ASSIGN_OR_RETURN(sel.is_vf, Bool(v, source, path));
    } else if (key == "hasVFs") {
      FABRIC_ASSIGN_OR_RETURN(sel.has_vfs, Bool(v, source, path));
    }
  }
  return sel;
}

absl::StatusOr<std::vector<EnvPreset>> ParseEnvPresets(const YAML::Node& node,
                                                       const std::string& source,
                                                       const std::string& key) {
  static const std::vector<EnvPreset> kAll = {EnvPreset::kMooncake, EnvPreset::kNccl,
                                              EnvPreset::kNcclGidIndex, EnvPreset::kUcx,
                                              EnvPreset::kLibfabric};
  FABRIC_ASSIGN_OR_RETURN(std::vector<std::string> names, StringList(node, source, key));
  std::set<EnvPreset> chosen;
  for (const std::string& n : names) {
    auto it =
        std::find_if(kAll.begin(), kAll.end(), [&](EnvPreset p) { return EnvPresetName(p) == n; });
    if (it == kAll.end()) {
      std::vector<std::string> known;
      for (EnvPreset p : kAll) known.push_back(EnvPresetName(p));
      return KeyError(source, key,
                      absl::StrCat("'", absl::CHexEscape(n.substr(0, 64)), "' is not a preset (",
                                   absl::StrJoin(known, ", "), ")"));
    }
    if (!chosen.insert(*it).second) {
      return KeyError(source, key, absl::StrCat("'", n, "' is listed twice"));
    }
  }
  std::vector<EnvPreset> out;
  for (EnvPreset p : kAll) {
    if (chosen.count(p)) out.push_back(p);
  }
  return out;
}

absl::StatusOr<PoolConfig> ParsePool(const YAML::Node& node, const std::string& source,
                                     const std::string& where) {
  if (!node.IsMap()) return KeyError(source, where, "expected a mapping");
  FABRIC_RETURN_IF_ERROR(
      CheckKeys(node, {"name", "mode", "tokensPerDevice", "selector", "env"}, source, where));
  PoolConfig pool;
  if (!node["name"] || !node["name"].IsScalar()) {
    return KeyError(source, where + ".name", "required");
  }
  pool.name = node["name"].as<std::string>();
  if (absl::Status s = ValidateResourceName(pool.name); !s.ok()) {
    return KeyError(source, where + ".name", std::string(s.message()));
  }
  std::string mode = node["mode"] ? node["mode"].as<std::string>() : "exclusive";
  if (mode == "exclusive")
    pool.mode = PoolMode::kExclusive;
  else if (mode == "shared")
    pool.mode = PoolMode::kShared;
  else
    return KeyError(source, where + ".mode",
                    absl::StrCat("'", mode, "' is not exclusive or shared"));
  if (node["tokensPerDevice"]) {
    if (pool.mode != PoolMode::kShared) {
      return KeyError(source, where + ".tokensPerDevice", "only valid with mode: shared");
    }
    FABRIC_ASSIGN_OR_RETURN(pool.tokens_per_device, Int(node["tokensPerDevice"], source,
                                                        where + ".tokensPerDevice", 1, 1000));
  }
  if (!node["selector"]) return KeyError(source, where + ".selector", "required");
  FABRIC_ASSIGN_OR_RETURN(pool.selector,
                          ParseSelector(node["selector"], source, where + ".selector"));
  if (node["env"]) {
    FABRIC_ASSIGN_OR_RETURN(pool.env, ParseEnvPresets(node["env"], source, where + ".env"));
  }
  return pool;
}

absl::Status ParseHealth(const YAML::Node& node, const std::string& source, HealthConfig* out) {
  const std::string where = "health";
  if (!node.IsMap()) return KeyError(source, where, "expected a mapping");
  FABRIC_RETURN_IF_ERROR(
      CheckKeys(node, {"pollIntervalMs", "portHoldDownMs", "efa"}, source, where));
  if (node["pollIntervalMs"]) {
    FABRIC_ASSIGN_OR_RETURN(out->poll_interval_ms, Int(node["pollIntervalMs"], source,
                                                       "health.pollIntervalMs", 10, 60000));
  }
  if (node["portHoldDownMs"]) {
    FABRIC_ASSIGN_OR_RETURN(out->port_hold_down_ms, Int(node["portHoldDownMs"], source,
                                                        "health.portHoldDownMs", 0, 600000));
  }
  if (const YAML::Node efa = node["efa"]) {
    if (!efa.IsMap()) return KeyError(source, "health.efa", "expected a mapping");
    FABRIC_RETURN_IF_ERROR(CheckKeys(efa, {"errorCounters", "checkIntervalMs", "quietPeriodMs"},
                                     source, "health.efa"));
    if (const YAML::Node counters = efa["errorCounters"]) {
      if (!counters.IsMap()) {
        return KeyError(source, "health.efa.errorCounters",
                        "expected a mapping of counter name to threshold");
      }
      out->efa.error_counters.clear();
      std::set<std::string> seen;
      for (auto it = counters.begin(); it != counters.end(); ++it) {
        std::string name = it->first.as<std::string>();
        // A sysfs attribute name: the kernel's are [a-z0-9_]; anything else would also reach file
        // paths, logs and JSON unquoted.
        if (!IsCounterFileName(name)) {
          return KeyError(source, "health.efa.errorCounters",
                          "\"" + absl::CHexEscape(name.substr(0, 64)) +
                              "\" is not a counter file name (1-64 of A-Z a-z 0-9 _ . -)");
        }
        const std::string key = "health.efa.errorCounters." + name;
        if (!seen.insert(name).second) return DuplicateKey(source, key);
        FABRIC_ASSIGN_OR_RETURN(int64_t t, Int(it->second, source, key, 1, INT64_MAX));
        out->efa.error_counters.push_back({name, static_cast<uint64_t>(t)});
      }
    }
    if (efa["checkIntervalMs"]) {
      FABRIC_ASSIGN_OR_RETURN(
          out->efa.check_interval_ms,
          Int(efa["checkIntervalMs"], source, "health.efa.checkIntervalMs", 10, 600000));
    }
    if (efa["quietPeriodMs"]) {
      FABRIC_ASSIGN_OR_RETURN(
          out->efa.quiet_period_ms,
          Int(efa["quietPeriodMs"], source, "health.efa.quietPeriodMs", 0, 86400000));
    }
  }
  return absl::OkStatus();
}

bool GlobAny(const std::vector<std::string>& globs, const std::string& value) {
  for (const std::string& g : globs) {
    if (fnmatch(g.c_str(), value.c_str(), 0) == 0) return true;
  }
  return false;
}

template <typename T>
bool Contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::string EnvPresetName(EnvPreset p) {
  switch (p) {
    case EnvPreset::kMooncake:
      return "mooncake";
    case EnvPreset::kNccl:
      return "nccl";
    case EnvPreset::kNcclGidIndex:
      return "nccl-gid-index";
    case EnvPreset::kUcx:
      return "ucx";
    case EnvPreset::kLibfabric:
      return "libfabric";
  }
  return "?";
}

std::string PoolModeName(PoolMode m) { return m == PoolMode::kShared ? "shared" : "exclusive"; }

bool Selector::Matches(const RdmaDevice& dev) const {
  if (!kinds.empty() && !Contains(kinds, dev.kind)) return false;
  const PciInfo* pci = dev.pci ? &*dev.pci : nullptr;
  if (!vendors.empty() && (!pci || !Contains(vendors, pci->vendor))) return false;
  if (!device_ids.empty() && (!pci || !Contains(device_ids, pci->device))) return false;
  if (!drivers.empty() && (!pci || !Contains(drivers, pci->driver))) return false;
  if (!pci_addresses.empty() && (!pci || !GlobAny(pci_addresses, pci->address))) return false;
  if (!ibdev_names.empty() && !GlobAny(ibdev_names, dev.name)) return false;
  if (!netdev_names.empty()) {
    bool any = false;
    for (const PortInfo& p : dev.ports)
      any = any || (!p.netdev.empty() && GlobAny(netdev_names, p.netdev));
    for (const std::string& n : dev.netdevs) any = any || GlobAny(netdev_names, n);
    if (!any) return false;
  }
  if (!link_types.empty()) {
    bool any = false;
    for (const PortInfo& p : dev.ports) any = any || Contains(link_types, p.link_layer);
    if (!any) return false;
  }
  const bool vf = pci && pci->is_vf();
  const bool pf_with_vfs = pci && !pci->is_vf() && pci->sriov_numvfs > 0;
  if (is_vf && *is_vf != vf) return false;
  if (has_vfs && *has_vfs != pf_with_vfs) return false;
  return true;
}

std::string PoolConfig::SocketName() const {
  std::string out = "fabric-";
  for (char c : name) out.push_back(absl::ascii_isalnum(c) || c == '.' || c == '-' ? c : '_');
  return out + ".sock";
}

const PoolConfig* Config::FindPool(const std::string& name) const {
  for (const PoolConfig& p : pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Config DefaultConfig() {
  Config c;
  PoolConfig efa{"vpc.amazonaws.com/efa", PoolMode::kExclusive, 64, {}};
  efa.selector.kinds = {DeviceKind::kEfa};
  PoolConfig rdma{"device.gpustack.ai/rdma", PoolMode::kExclusive, 64, {}};
  rdma.selector.kinds = {DeviceKind::kRdma};
  rdma.selector.is_vf = false;
  rdma.selector.has_vfs = false;
  PoolConfig shared = rdma;
  shared.name = "device.gpustack.ai/rdma.shared";
  shared.mode = PoolMode::kShared;
  PoolConfig partitioned{"device.gpustack.ai/rdma.partitioned", PoolMode::kExclusive, 64, {}};
  partitioned.selector.kinds = {DeviceKind::kRdma};
  partitioned.selector.is_vf = true;
  c.pools = {efa, rdma, shared, partitioned};
  c.health.efa.error_counters = {{"cmds_err", 1},
                                 {"no_completion_cmds", 1},
                                 {"rdma_read_wr_err", 1},
                                 {"rdma_write_wr_err", 1},
                                 {"unresponsive_remote_events", 1},
                                 {"impaired_remote_conn_events", 1}};
  return c;
}

absl::StatusOr<Config> ParseConfig(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid YAML/JSON: ", e.what()));
  }
  Config config = DefaultConfig();
  if (root.IsNull()) return config;  // an empty file means the defaults
  if (!root.IsMap()) return KeyError(source, "(top level)", "expected a mapping");
  try {
    FABRIC_RETURN_IF_ERROR(CheckKeys(root, {"pools", "health"}, source, ""));
    if (const YAML::Node pools = root["pools"]) {
      if (!pools.IsSequence()) return KeyError(source, "pools", "expected a list");
      config.pools.clear();
      std::set<std::string> names;
      for (size_t i = 0; i < pools.size(); ++i) {
        const std::string where = absl::StrCat("pools[", i, "]");
        FABRIC_ASSIGN_OR_RETURN(PoolConfig pool, ParsePool(pools[i], source, where));
        if (!names.insert(pool.name).second) {
          return KeyError(source, where + ".name",
                          absl::StrCat("duplicate pool '", pool.name, "'"));
        }
        config.pools.push_back(std::move(pool));
      }
    }
    if (const YAML::Node health = root["health"]) {
      FABRIC_RETURN_IF_ERROR(ParseHealth(health, source, &config.health));
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", e.what()));
  }
  return config;
}

absl::StatusOr<Config> LoadConfigFile(const std::string& path) {
  FABRIC_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseConfig(text, path);
}

absl::Status ValidateResourceName(const std::string& name) {
  auto invalid = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ResourceName \"", name, "\" is invalid: ", why));
  };
  size_t slash = name.find('/');
  if (slash == std::string::npos) return invalid("must be <domain>/<name>");
  if (absl::StrContains(name, "kubernetes.io/")) {
    return invalid("the kubernetes.io/ namespace is reserved");
  }
  if (absl::StartsWith(name, "requests.")) return invalid("must not start with 'requests.'");
  // The kubelet checks "requests." + name as a qualified name.
  const std::string prefix = "requests." + name.substr(0, slash);
  const std::string short_name = name.substr(slash + 1);
  if (name.find('/', slash + 1) != std::string::npos) return invalid("more than one '/'");
  static const std::regex kLabel(
      "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*");
  if (prefix.size() > 253 || !std::regex_match(prefix, kLabel)) {
    return invalid("the prefix must be a DNS subdomain (lowercase, at most 253 characters)");
  }
  static const std::regex kName("[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?");
  if (short_name.empty() || short_name.size() > 63 || !std::regex_match(short_name, kName)) {
    return invalid(
        "the name part must be 1-63 characters of [A-Za-z0-9_.-], "
        "starting and ending alphanumeric");
  }
  return absl::OkStatus();
}

std::vector<std::string> PoolsSelecting(const Config& config, const RdmaDevice& dev) {
  std::vector<std::string> out;
  for (const PoolConfig& p : config.pools) {
    if (p.selector.Matches(dev)) out.push_back(p.name);
  }
  return out;
}

}  // namespace fabric
