#include "agent/status/node_status.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "agent/base/host_paths.h"
#include "agent/base/json_text.h"
#include "agent/engine_env/engine_env.h"
#include "nlohmann/json.hpp"

namespace fabric::status {
namespace {

const Registration* FindRegistration(const StatusInput& in, const std::string& resource) {
  for (const Registration& r : in.registrations) {
    if (r.resource == resource) return &r;
  }
  return nullptr;
}

// The devices held through `resource` (the kubelet's view).
std::set<std::string> HeldDevices(const std::vector<PodDeviceHold>& holds,
                                  const std::string& resource) {
  std::set<std::string> out;
  for (const PodDeviceHold& h : holds) {
    if (h.resource == resource) out.insert(h.device);
  }
  return out;
}

// A pool's env presets and, per present device's port, the RoCE v2 IPv4 GID
// index a grant would carry, or why none; then what a grant of all of them
// would get (devices that disagree: a grant mixing them gets no index); and
// what the grants held now were given, and whether it still names its GID.
nlohmann::json EngineEnvJson(const PoolRegistry::PoolView& pv, const NodeView& node,
                             const std::vector<PodDeviceHold>& holds) {
  using nlohmann::json;
  json presets = json::array();
  for (EnvPreset p : pv.config.env) presets.push_back(EnvPresetName(p));
  std::vector<const RdmaDevice*> present;
  for (const auto& [name, dev] : pv.snapshot->devices) {
    if (const RdmaDevice* live = node.inventory.Find(name)) present.push_back(live);
  }
  const std::vector<engine_env::PortGid> gids = engine_env::PortGids(present);
  json ports = json::array();
  for (const engine_env::PortGid& g : gids) {
    ports.push_back({{"device", g.device},
                     {"port", g.port},
                     {"gid_index", g.choice.index ? json(*g.choice.index) : json(nullptr)},
                     {"gid", g.choice.gid},
                     {"ipv4", g.choice.ipv4},
                     {"netdev", g.choice.netdev},
                     {"candidates", g.choice.candidates},
                     {"reason", g.choice.reason}});
  }
  const engine_env::GidAgreement all = engine_env::AgreeOnGidIndex(gids);
  json given = json::array();
  for (const engine_env::GivenGid& g :
       pv.state->gid_ledger().Current(HeldDevices(holds, pv.config.name))) {
    const std::string gone = engine_env::WhyGone(g, node.inventory.Find(g.device));
    given.push_back(
        {{"device", g.device},
         {"port", g.port},
         {"gid_index", g.index},
         {"gid", g.gid},
         {"ipv4", g.ipv4},
         {"netdev", g.netdev},
         {"variables", g.variables},
         {"given_at", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", g.given_at, absl::UTCTimeZone())},
         {"in_table", gone.empty()},
         {"gone", gone}});
  }
  return {{"presets", presets},
          {"ports", ports},
          {"gid_index_all_devices", all.index ? json(*all.index) : json(nullptr)},
          {"gid_index_reason", all.reason},
          {"given", given}};
}

}  // namespace

MetricsInput BuildMetricsInput(const StatusInput& in) {
  const NodeView& node = in.pools.node;
  MetricsInput m;
  m.version = in.version;
  m.kubelet_restarts = in.kubelet_restarts;
  m.devices = node.inventory.devices;
  m.health = node.health;
  for (const auto& [name, dev] : node.known) {
    if (!node.inventory.Find(name))
      m.health[name] = DeviceHealth{false, "device removed", HealthCause::kRemoved};
  }
  for (const auto& d : node.inventory.devices) m.health.emplace(d.name, DeviceHealth{});
  m.holds = in.pools.holds;
  m.podresources_errors = in.podresources_errors;
  m.kubelet_view_complete = in.kubelet_view.complete;
  m.podresources_list_failing_seconds = absl::ToDoubleSeconds(in.kubelet_view.list_failing_for);
  m.kubelet_checkpoint_readable = in.kubelet_view.checkpoint_ok;
  m.discovery_warnings = node.inventory.warnings.size();
  for (const PoolRegistry::PoolView& p : in.pools.pools) {
    PoolMetrics pm;
    pm.resource = p.config.name;
    pm.mode = PoolModeName(p.config.mode);
    pm.units = p.snapshot->units.size();
    pm.healthy_units = p.snapshot->HealthyCount();
    pm.allocated_units = p.allocated_units;
    if (const Registration* r = FindRegistration(in, p.config.name)) {
      pm.registered = r->registered;
      pm.registration_mode = r->mode;
    }
    PoolStats& stats = p.state->stats();
    pm.allocate_ok = stats.allocate_ok.load();  // counted at completion, never derived
    pm.allocate_error = stats.allocate_errors.load();
    pm.allocate_latency = stats.allocate_latency.Read();
    m.pools.push_back(std::move(pm));
    // Per hold and port whose GID index value can be told: still its GID?
    if (p.config.env.empty()) continue;
    const std::vector<engine_env::GivenGid> given =
        p.state->gid_ledger().Current(HeldDevices(in.pools.holds, p.config.name));
    if (given.empty()) continue;
    for (const PodDeviceHold& h : in.pools.holds) {
      if (h.resource != p.config.name || h.pod.empty()) continue;
      const RdmaDevice* live = node.inventory.Find(h.device);
      if (live == nullptr) continue;
      for (const PortInfo& port : live->ports) {
        std::optional<engine_env::GivenGid> g =
            engine_env::HolderValue(given, h.device, port.number);
        if (!g) continue;
        m.gid_index_stale.push_back({h, port.number, !engine_env::WhyGone(*g, live).empty()});
      }
    }
  }
  return m;
}

std::string NotReadyReason(const std::vector<Registration>& registrations) {
  std::string why;
  for (const Registration& r : registrations) {
    if (!r.registered) {
      absl::StrAppend(&why, why.empty() ? "" : "; ", r.resource, " not registered",
                      r.last_error.empty() ? "" : ": " + r.last_error);
    }
  }
  return why;
}

void ReadinessReasons::Set(const std::string& source, std::string reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (reason.empty()) {
    reasons_.erase(source);
  } else {
    reasons_[source] = std::move(reason);
  }
}

std::string ReadinessReasons::Join() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string why;
  for (const auto& [source, reason] : reasons_)
    absl::StrAppend(&why, why.empty() ? "" : "; ", reason);
  return why;
}

std::string NodeJson(const StatusInput& in) {
  using nlohmann::json;
  const NodeView& node = in.pools.node;
  json out;
  json devices = json::array();
  for (const auto& [name, dev] : node.known) {
    const RdmaDevice* live = node.inventory.Find(name);
    json d;
    d["name"] = name;
    d["kind"] = std::string(DeviceKindName(dev.kind));
    d["present"] = live != nullptr;
    auto h = node.health.find(name);
    d["healthy"] = live != nullptr && (h == node.health.end() || h->second.healthy);
    d["reason"] =
        live == nullptr ? "device removed" : (h == node.health.end() ? "" : h->second.reason);
    d["pci"] = dev.pci ? json(dev.pci->address) : json(nullptr);
    d["numa_node"] = dev.numa_node();
    d["uverbs"] = {{"path", HostDevicePath(dev.uverbs.rel_path)},
                   {"major", dev.uverbs.major},
                   {"minor", dev.uverbs.minor}};
    d["netdev"] = dev.PrimaryNetdev();
    d["link_layer"] = dev.LinkLayer();
    d["pools"] = PoolsSelecting(in.pools.config, dev);
    json ports = json::array();
    for (const PortInfo& p : (live ? live->ports : dev.ports)) {
      ports.push_back({{"port", p.number},
                       {"state", p.state},
                       {"phys_state", p.phys_state},
                       {"link_layer", p.link_layer},
                       {"rate", p.rate},
                       {"active", p.active()}});
    }
    d["ports"] = ports;
    devices.push_back(d);
  }
  out["devices"] = devices;
  out["rdma_cm"] = node.inventory.rdma_cm ? json({{"major", node.inventory.rdma_cm->major},
                                                  {"minor", node.inventory.rdma_cm->minor}})
                                          : json(nullptr);
  json pools = json::array();
  for (const PoolRegistry::PoolView& pv : in.pools.pools) {
    json p;
    p["resource"] = pv.config.name;
    p["mode"] = PoolModeName(pv.config.mode);
    p["units"] = pv.snapshot->units.size();
    p["healthy_units"] = pv.snapshot->HealthyCount();
    p["allocated_units"] = pv.allocated_units;
    p["withdrawn_units"] = pv.withdrawn_units;
    p["pending_grants"] = pv.pending_grants;
    p["registered"] = false;
    if (const Registration* r = FindRegistration(in, pv.config.name)) {
      p["registered"] = r->registered;
      p["registration"] = r->mode;
      p["socket"] = r->socket;
    }
    if (!pv.config.env.empty()) p["engine_env"] = EngineEnvJson(pv, node, in.pools.holds);
    pools.push_back(p);
  }
  out["pools"] = pools;
  json holds = json::array();
  for (const PodDeviceHold& h : in.pools.holds) {
    holds.push_back({{"namespace", h.ns},
                     {"pod", h.pod},
                     {"container", h.container},
                     {"resource", h.resource},
                     {"device", h.device},
                     {"pod_uid", h.pod_uid}});
  }
  out["allocations"] = holds;
  const holds::HoldsStatus& kv = in.kubelet_view;
  out["kubelet_view"] = {
      {"complete", kv.complete},
      {"incomplete_reason", kv.incomplete_reason},
      {"checkpoint", kv.checkpoint_ok ? "read" : kv.checkpoint_error},
      {"podresources_list_failing_seconds", absl::ToDoubleSeconds(kv.list_failing_for)},
      {"podresources_list_errors", kv.list_errors},
      {"last_list_error", kv.last_list_error},
      {"kubelet_restarts", kv.kubelet_restarts}};
  out["warnings"] = node.inventory.warnings;
  if (in.dra) {
    const DraStatus& d = *in.dra;
    out["dra"] = {{"driver", d.driver},
                  {"pool", d.pool},
                  {"registered", d.registered},
                  {"slices",
                   {{"synced", d.slices_synced},
                    {"count", d.slices},
                    {"devices", d.devices},
                    {"generation", d.generation},
                    {"sync_failures", d.slice_sync_failures},
                    {"last_error", d.slice_error}}},
                  {"claims",
                   {{"listed", d.claims_listed},
                    {"allocated", d.claims},
                    {"rejected", d.claims_rejected},
                    {"prepared", d.prepared_claims}}},
                  {"prepare",
                   {{"calls", d.prepare_calls},
                    {"errors", d.prepare_errors},
                    {"unprepare_calls", d.unprepare_calls},
                    {"unprepare_errors", d.unprepare_errors}}},
                  {"checkpoint_error", d.checkpoint_error}};
  }
  return DumpJson(out, 2) + "\n";
}

std::string DraMetricsText(const StatusInput& in) {
  if (!in.dra) return "";
  const DraStatus& d = *in.dra;
  std::string out;
  auto gauge = [&out](const char* name, const char* help, const char* type, double v) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ",
                    v, "\n");
  };
  gauge("fabric_dra_registered", "1 while the kubelet has registered the DRA driver.", "gauge",
        d.registered ? 1 : 0);
  gauge("fabric_dra_slices_synced", "1 while the ResourceSlices match the pools.", "gauge",
        d.slices_synced ? 1 : 0);
  gauge("fabric_dra_slices_published", "ResourceSlices this node publishes.", "gauge",
        static_cast<double>(d.slices));
  gauge("fabric_dra_devices_published", "DRA devices in this node's ResourceSlices.", "gauge",
        static_cast<double>(d.devices));
  gauge("fabric_dra_slice_sync_failures_total", "ResourceSlice syncs that failed.", "counter",
        static_cast<double>(d.slice_sync_failures));
  gauge("fabric_dra_claims_allocated", "Allocated ResourceClaims naming a device of this node.",
        "gauge", static_cast<double>(d.claims));
  gauge("fabric_dra_claims_prepared", "Claims prepared on this node (the checkpoint).", "gauge",
        static_cast<double>(d.prepared_claims));
  gauge("fabric_dra_prepare_calls_total", "NodePrepareResources calls.", "counter",
        static_cast<double>(d.prepare_calls));
  gauge("fabric_dra_prepare_errors_total", "Claims NodePrepareResources answered with an error.",
        "counter", static_cast<double>(d.prepare_errors));
  gauge("fabric_dra_unprepare_calls_total", "NodeUnprepareResources calls.", "counter",
        static_cast<double>(d.unprepare_calls));
  gauge("fabric_dra_unprepare_errors_total",
        "Claims NodeUnprepareResources answered with an error.", "counter",
        static_cast<double>(d.unprepare_errors));
  // Buckets up to 1 s as Allocate's; a prepare that reads the API server can
  // take longer, which +Inf shows.
  const char* h = "fabric_dra_prepare_duration_seconds";
  absl::StrAppend(&out, "# HELP ", h, " NodePrepareResources latency.\n# TYPE ", h, " histogram\n");
  for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
    absl::StrAppend(&out, h, "_bucket{le=\"", LatencyHistogram::kBounds[i], "\"} ",
                    d.prepare_latency.cumulative[i], "\n");
  }
  absl::StrAppend(&out, h, "_bucket{le=\"+Inf\"} ", d.prepare_latency.count, "\n", h, "_sum ",
                  d.prepare_latency.sum, "\n", h, "_count ", d.prepare_latency.count, "\n");
  return out;
}

}  // namespace fabric::status
