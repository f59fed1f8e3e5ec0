#include "tools/fabricctl/devices.h"

#include <fmt/format.h>

#include <optional>

#include "agent/base/host_paths.h"
#include "agent/base/json_text.h"
#include "agent/http/get.h"
#include "agent/sysfs/sysfs_discovery.h"

namespace fabric::fabricctl {
namespace {

using json = nlohmann::ordered_json;

json CharDeviceJson(const CharDevice& c) {
  return json{{"path", HostDevicePath(c.rel_path)},
              {"rel_path", c.rel_path},
              {"major", c.major},
              {"minor", c.minor},
              {"dev", fmt::format("{}:{}", c.major, c.minor)}};
}

std::string Hex(uint32_t v) { return fmt::format("{:#06x}", v); }

std::string PoolList(const std::vector<std::string>& pools) {
  std::string out;
  for (const auto& p : pools) out += (out.empty() ? "" : ",") + p;
  return out.empty() ? "-" : out;
}

}  // namespace

json DevicesToJson(const NodeInventory& inv, const Config& config,
                   const std::string& config_source) {
  json devices = json::array();
  for (const RdmaDevice& d : inv.devices) {
    json pci = nullptr;
    if (d.pci) {
      pci = json{{"address", d.pci->address},
                 {"vendor", Hex(d.pci->vendor)},
                 {"device", Hex(d.pci->device)},
                 {"driver", d.pci->driver},
                 {"numa_node", d.pci->numa_node},
                 {"is_vf", d.pci->is_vf()},
                 {"physfn", d.pci->physfn.empty() ? json(nullptr) : json(d.pci->physfn)},
                 {"sriov_numvfs", d.pci->sriov_numvfs}};
    }
    json ports = json::array();
    for (const PortInfo& p : d.ports) {
      ports.push_back({{"number", p.number},
                       {"state", p.state},
                       {"state_code", p.state_code},
                       {"phys_state", p.phys_state},
                       {"phys_state_code", p.phys_state_code},
                       {"active", p.active()},
                       {"link_layer", p.link_layer},
                       {"rate", p.rate},
                       {"netdev", p.netdev}});
    }
    devices.push_back({{"name", d.name},
                       {"kind", std::string(DeviceKindName(d.kind))},
                       {"node_type", d.node_type},
                       {"node_guid", d.node_guid},
                       {"pci", pci},
                       {"numa_node", d.numa_node()},
                       {"uverbs", CharDeviceJson(d.uverbs)},
                       {"link_layer", d.LinkLayer()},
                       {"netdev", d.PrimaryNetdev()},
                       {"netdevs", d.netdevs},
                       {"ports", ports},
                       {"pools", PoolsSelecting(config, d)}});
  }
  json pools = json::array();
  for (const PoolConfig& p : config.pools) {
    json names = json::array();
    for (const RdmaDevice& d : inv.devices) {
      if (p.selector.Matches(d)) names.push_back(d.name);
    }
    json pool = {{"name", p.name}, {"mode", PoolModeName(p.mode)}};
    if (p.mode == PoolMode::kShared) pool["tokens_per_device"] = p.tokens_per_device;
    pool["devices"] = names;
    pools.push_back(std::move(pool));
  }
  return json{{"config", config_source},
              {"devices", devices},
              {"rdma_cm", inv.rdma_cm ? CharDeviceJson(*inv.rdma_cm) : json(nullptr)},
              {"pools", pools},
              {"warnings", inv.warnings}};
}

std::string DevicesToText(const NodeInventory& inv, const Config& config,
                          const std::string& config_source) {
  constexpr const char* kRow = "{:<12} {:<4} {:<12} {:>4} {:<10} {:<8} {:<6} {:<10} {:<12} {}\n";
  std::string out = fmt::format(kRow, "NAME", "KIND", "PCI", "NUMA", "UVERBS", "STATE", "PHYS",
                                "LINK", "NETDEV", "POOLS");
  for (const RdmaDevice& d : inv.devices) {
    const PortInfo* port = d.ports.empty() ? nullptr : &d.ports.front();
    std::string state = port ? port->state : "-";
    if (d.ports.size() > 1) state += fmt::format("+{}", d.ports.size() - 1);
    std::string netdev = d.PrimaryNetdev();
    out += fmt::format(kRow, d.name, DeviceKindName(d.kind), d.pci ? d.pci->address : "-",
                       d.numa_node(), fmt::format("{}:{}", d.uverbs.major, d.uverbs.minor), state,
                       port ? port->phys_state : "-", d.LinkLayer().empty() ? "-" : d.LinkLayer(),
                       netdev.empty() ? "-" : netdev, PoolList(PoolsSelecting(config, d)));
  }
  if (inv.devices.empty()) out += "(no RDMA devices)\n";
  out += fmt::format(
      "{} device(s); rdma_cm {}; pools from {}:\n", inv.devices.size(),
      inv.rdma_cm ? fmt::format("{}:{}", inv.rdma_cm->major, inv.rdma_cm->minor) : "absent",
      config_source);
  for (const PoolConfig& p : config.pools) {
    int n = 0;
    for (const RdmaDevice& d : inv.devices) n += p.selector.Matches(d) ? 1 : 0;
    out += fmt::format(
        "  {:<36} {:<9} {} device(s){}\n", p.name, PoolModeName(p.mode), n,
        p.mode == PoolMode::kShared ? fmt::format(" x {} tokens", p.tokens_per_device) : "");
  }
  for (const std::string& w : inv.warnings) out += "warning: " + w + "\n";
  return out;
}

namespace {

// Members of a document from the agent, read without trusting their types.
template <typename J>
bool BoolOf(const J& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_boolean() && o[key].template get<bool>();
}
template <typename J>
uint64_t NumOf(const J& o, const char* a, const char* b) {
  if (!o.is_object() || !o.contains(a) || !o[a].is_object() || !o[a].contains(b)) return 0;
  return o[a][b].is_number_unsigned() ? o[a][b].template get<uint64_t>() : 0;
}

}  // namespace

nlohmann::ordered_json AgentServing(const nlohmann::json& node) {
  nlohmann::ordered_json out;
  out["pools"] = nlohmann::ordered_json::array();
  if (node.is_object() && node.contains("pools") && node["pools"].is_array()) {
    for (const nlohmann::json& p : node["pools"]) {
      if (!p.is_object()) continue;
      out["pools"].push_back({{"resource", StringAt(p, {"resource"})},
                              {"registration", StringAt(p, {"registration"})},
                              {"registered", BoolOf(p, "registered")}});
    }
  }
  out["dra"] = nullptr;
  if (node.is_object() && node.contains("dra") && node["dra"].is_object()) out["dra"] = node["dra"];
  return out;
}

std::string AgentServingToText(const nlohmann::ordered_json& serving, const std::string& agent) {
  std::string out = fmt::format("\nagent {}:\n", agent);
  if (serving.contains("pools") && serving["pools"].is_array()) {
    for (const auto& p : serving["pools"]) {
      out += fmt::format("  {:<36} {:<8} {}\n", StringAt(p, {"resource"}),
                         StringAt(p, {"registration"}),
                         BoolOf(p, "registered") ? "registered" : "NOT registered");
    }
  }
  if (!serving.contains("dra") || !serving["dra"].is_object()) return out;
  const auto& d = serving["dra"];
  const bool synced = d.contains("slices") && BoolOf(d["slices"], "synced");
  out += fmt::format(
      "  DRA driver {} (pool {}): {}; {} ResourceSlice(s), {} device(s), generation {}{}\n",
      StringAt(d, {"driver"}), StringAt(d, {"pool"}),
      BoolOf(d, "registered") ? "registered" : "NOT registered", NumOf(d, "slices", "count"),
      NumOf(d, "slices", "devices"), NumOf(d, "slices", "generation"),
      synced ? "" : " (NOT synced)");
  out += fmt::format("  claims: {} allocated here, {} prepared; prepare: {} call(s), {} error(s)\n",
                     NumOf(d, "claims", "allocated"), NumOf(d, "claims", "prepared"),
                     NumOf(d, "prepare", "calls"), NumOf(d, "prepare", "errors"));
  const std::string err = StringAt(d, {"slices", "last_error"});
  if (!err.empty()) out += fmt::format("  last slice error: {}\n", err);
  return out;
}

int RunDevices(const DevicesOptions& o) {
  HostPaths paths = HostPaths::Defaults();
  paths.sysfs_root = o.sysfs_root;
  paths.dev_root = o.dev_root;
  Config config = DefaultConfig();
  std::string source = "built-in defaults";
  if (!o.config_path.empty()) {
    auto loaded = LoadConfigFile(o.config_path);
    if (!loaded.ok()) {
      fmt::print(stderr, "fabricctl devices: {}\n", std::string(loaded.status().message()));
      return kExitUsage;
    }
    config = *std::move(loaded);
    source = o.config_path;
  }
  auto inv = DiscoverNode(paths);
  if (!inv.ok()) {
    fmt::print(stderr, "fabricctl devices: {}\n", std::string(inv.status().message()));
    return kExitError;
  }
  std::optional<nlohmann::ordered_json> serving;
  if (!o.agent.empty()) {
    auto res = HttpGet(o.agent, "/v1/node");
    if (!res.ok()) {
      fmt::print(stderr, "fabricctl devices: {}\n", std::string(res.status().message()));
      return kExitError;
    }
    nlohmann::json node = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    if (res->status != 200 || node.is_discarded()) {
      fmt::print(stderr, "fabricctl devices: {}/v1/node answered HTTP {} without a node document\n",
                 o.agent, res->status);
      return kExitError;
    }
    serving = AgentServing(node);
  }
  if (o.format == OutputFormat::kJson) {
    nlohmann::ordered_json doc = DevicesToJson(*inv, config, source);
    if (serving) doc["agent"] = *serving;
    fmt::print("{}\n", DumpJson(doc, 2));
  } else {
    fmt::print("{}", DevicesToText(*inv, config, source));
    if (serving) fmt::print("{}", AgentServingToText(*serving, o.agent));
  }
  return kExitOk;
}

}  // namespace fabric::fabricctl
