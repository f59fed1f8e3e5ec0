#include "agent/metrics/metrics.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/file_util.h"
#include "agent/base/prometheus_text.h"

namespace fabric {

namespace {

// Label values are views: every sample is written before its values go away.
using Labels = std::vector<std::pair<std::string_view, std::string_view>>;

// Collects samples per family so each family's HELP/TYPE is written once and
// its samples stay together, as the text format requires. Appends in place:
// no per-sample allocation beyond the growing family text.
class Writer {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    if (Find(name) != nullptr) return;
    std::string text = "# HELP ";
    text.append(name).append(" ").append(help).append("\n# TYPE ");
    text.append(name).append(" ").append(type).append("\n");
    families_.push_back({std::string(name), std::move(text)});
  }
  void Sample(std::string_view family, std::string_view name, const Labels& labels,
              std::string_view value) {
    std::string* out = Find(family);
    if (out == nullptr) {
      families_.push_back({std::string(family), ""});
      out = &families_.back().second;
      last_ = families_.size() - 1;
    }
    out->append(name);
    if (!labels.empty()) {
      out->push_back('{');
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i) out->push_back(',');
        out->append(labels[i].first);
        out->append("=\"");
        // The one escaper (agent/base): any bytes give a parsable line.
        AppendPrometheusLabelValue(out, labels[i].second);
        out->push_back('"');
      }
      out->push_back('}');
    }
    out->push_back(' ');
    out->append(value);
    out->push_back('\n');
  }
  void Sample(std::string_view name, const Labels& labels, uint64_t value) {
    char buf[absl::numbers_internal::kFastToBufferSize];
    char* end = absl::numbers_internal::FastIntToBuffer(value, buf);
    Sample(name, name, labels, std::string_view(buf, static_cast<size_t>(end - buf)));
  }
  std::string Text() const {
    size_t n = 0;
    for (const auto& f : families_) n += f.second.size();
    std::string out;
    out.reserve(n);
    for (const auto& f : families_) out += f.second;
    return out;
  }

 private:
  std::string* Find(std::string_view name) {
    if (last_ < families_.size() && families_[last_].first == name) return &families_[last_].second;
    for (size_t i = 0; i < families_.size(); ++i) {
      if (families_[i].first == name) {
        last_ = i;
        return &families_[i].second;
      }
    }
    return nullptr;
  }
  std::vector<std::pair<std::string, std::string>> families_;  // in order of first use
  size_t last_ = 0;
};

using Counter = CounterValue;

bool IsPmaData(const std::string& name, std::string* direction) {
  if (name == "port_xmit_data")
    *direction = "xmit";
  else if (name == "port_rcv_data")
    *direction = "rcv";
  else
    return false;
  return true;
}

std::string Render(const MetricsInput& in) {
  Writer w;
  w.Family("fabric_build_info", "gauge", "Agent build information.");
  w.Sample("fabric_build_info", {{"version", in.version}}, 1);

  w.Family("fabric_device_info", "gauge", "One series per RDMA device the agent sees.");
  w.Family("fabric_device_healthy", "gauge",
           "1 when the device is advertised Healthy; reason says why not.");
  w.Family("fabric_port_info", "gauge", "Port attributes as sysfs reports them.");
  w.Family("fabric_port_active", "gauge", "1 when the port is ACTIVE and LinkUp.");
  w.Family("fabric_hw_stat_total", "counter",
           "Driver hw_counters (port=\"0\": device-level hw_counters).");
  w.Family("fabric_port_data_bytes_total", "counter",
           "PMA port_xmit_data/port_rcv_data converted to bytes (they count 4-byte words).");
  w.Family("fabric_pma_stat_total", "counter", "Other IB PMA port counters (counters/).");

  // The sample's counters by device (the sample outlives the render).
  std::map<std::string_view, const sampler::DeviceCounters*> counters;
  if (in.sample) {
    for (const sampler::DeviceCounters& c : in.sample->counters) counters.emplace(c.device, &c);
  }
  for (const RdmaDevice& d : in.devices) {
    w.Sample("fabric_device_info",
             {{"device", d.name},
              {"kind", std::string(DeviceKindName(d.kind))},
              {"pci", d.pci ? d.pci->address : ""},
              {"driver", d.pci ? d.pci->driver : ""},
              {"numa_node", absl::StrCat(d.numa_node())},
              {"netdev", d.PrimaryNetdev()},
              {"uverbs", HostDevicePath(d.uverbs.rel_path)}},
             1);
    for (const PortInfo& p : d.ports) {
      const std::string port = absl::StrCat(p.number);
      w.Sample("fabric_port_info",
               {{"device", d.name},
                {"port", port},
                {"state", p.state},
                {"phys_state", p.phys_state},
                {"link_layer", p.link_layer},
                {"rate", p.rate},
                {"netdev", p.netdev}},
               1);
      w.Sample("fabric_port_active", {{"device", d.name}, {"port", port}}, p.active() ? 1 : 0);
    }
    auto found = counters.find(d.name);
    if (found == counters.end()) continue;
    for (const Counter& c : found->second->hw) {
      w.Sample("fabric_hw_stat_total", {{"device", d.name}, {"port", c.port}, {"counter", c.name}},
               c.value);
    }
    for (const Counter& c : found->second->pma) {
      std::string dir;
      if (IsPmaData(c.name, &dir)) {
        w.Sample("fabric_port_data_bytes_total",
                 {{"device", d.name}, {"port", c.port}, {"direction", dir}}, c.value * 4);
      } else {
        w.Sample("fabric_pma_stat_total",
                 {{"device", d.name}, {"port", c.port}, {"counter", c.name}}, c.value);
      }
    }
  }
  for (const auto& [name, h] : in.health) {
    // The bounded cause, never the detail ("cmds_err grew by 5"): one series
    // per device and cause. The detail is in the log and /v1/node.
    w.Sample("fabric_device_healthy", {{"device", name}, {"reason", h.CauseLabel()}},
             h.healthy ? 1 : 0);
  }

  w.Family("fabric_resource_units", "gauge", "Units advertised to the kubelet per resource.");
  w.Family("fabric_resource_healthy_units", "gauge", "Healthy units per resource.");
  w.Family("fabric_resource_allocated_units", "gauge",
           "Units held by Pods per resource (from the kubelet's PodResources API).");
  w.Family("fabric_resource_registered", "gauge",
           "1 when the resource is registered with the kubelet.");
  w.Family("fabric_allocate_requests_total", "counter", "Allocate calls by result.");
  w.Family("fabric_allocate_duration_seconds", "histogram", "Allocate handling time.");
  for (const PoolMetrics& p : in.pools) {
    const Labels r = {{"resource", p.resource}};
    w.Sample("fabric_resource_units", {{"resource", p.resource}, {"mode", p.mode}}, p.units);
    w.Sample("fabric_resource_healthy_units", r, p.healthy_units);
    w.Sample("fabric_resource_allocated_units", r, p.allocated_units);
    w.Sample("fabric_resource_registered",
             {{"resource", p.resource}, {"mode", p.registration_mode}}, p.registered ? 1 : 0);
    w.Sample("fabric_allocate_requests_total", {{"resource", p.resource}, {"result", "ok"}},
             p.allocate_ok);
    w.Sample("fabric_allocate_requests_total", {{"resource", p.resource}, {"result", "error"}},
             p.allocate_error);
    const auto& h = p.allocate_latency;
    for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
      w.Sample("fabric_allocate_duration_seconds", "fabric_allocate_duration_seconds_bucket",
               {{"resource", p.resource}, {"le", absl::StrCat(LatencyHistogram::kBounds[i])}},
               absl::StrCat(h.cumulative[i]));
    }
    w.Sample("fabric_allocate_duration_seconds", "fabric_allocate_duration_seconds_bucket",
             {{"resource", p.resource}, {"le", "+Inf"}}, absl::StrCat(h.count));
    w.Sample("fabric_allocate_duration_seconds", "fabric_allocate_duration_seconds_sum", r,
             absl::StrCat(h.sum));
    w.Sample("fabric_allocate_duration_seconds", "fabric_allocate_duration_seconds_count", r,
             absl::StrCat(h.count));
  }

  w.Family("fabric_pod_device_info", "gauge", "A container's hold on a fabric device.");
  w.Family("fabric_pod_hw_stat_total", "counter",
           "hw_counters of each device a Pod holds, labelled with the Pod "
           "(a shared device's counters appear under every Pod sharing it).");
  w.Family("fabric_pod_port_data_bytes_total", "counter",
           "PMA data bytes of each device a Pod holds, labelled with the Pod.");
  std::set<std::tuple<std::string, std::string, std::string, std::string>> seen;
  for (const PodDeviceHold& hold : in.holds) {
    // A hold known from the kubelet checkpoint alone has no Pod name yet.
    if (hold.pod.empty()) continue;
    w.Sample("fabric_pod_device_info",
             {{"namespace", hold.ns},
              {"pod", hold.pod},
              {"container", hold.container},
              {"resource", hold.resource},
              {"device", hold.device}},
             1);
    // One set of counter series per (pod, container, device), whatever the resource.
    if (!seen.insert({hold.ns, hold.pod, hold.container, hold.device}).second) continue;
    auto it = counters.find(hold.device);
    if (it == counters.end()) continue;
    Labels l = {{"namespace", hold.ns},  {"pod", hold.pod}, {"container", hold.container},
                {"device", hold.device}, {"port", ""},      {"counter", ""}};
    for (const Counter& c : it->second->hw) {
      l[4].second = c.port;
      l[5].second = c.name;
      w.Sample("fabric_pod_hw_stat_total", l, c.value);
    }
    l[5].first = "direction";
    for (const Counter& c : it->second->pma) {
      std::string dir;
      if (!IsPmaData(c.name, &dir)) continue;
      l[4].second = c.port;
      l[5].second = dir;
      w.Sample("fabric_pod_port_data_bytes_total", l, c.value * 4);
    }
  }

  w.Family("fabric_pod_gid_index_stale", "gauge",
           "1 when the GID index a container's grant carried (MC_GID_INDEX, NCCL_IB_GID_INDEX) "
           "no longer names the GID it named at Allocate; the container's variables cannot "
           "change until it restarts.");
  for (const GidIndexStale& g : in.gid_index_stale) {
    w.Sample("fabric_pod_gid_index_stale",
             {{"namespace", g.hold.ns},
              {"pod", g.hold.pod},
              {"container", g.hold.container},
              {"device", g.hold.device},
              {"port", absl::StrCat(g.port)}},
             g.stale ? 1 : 0);
  }

  w.Family("fabric_kubelet_restarts_total", "counter",
           "Kubelet restarts seen (kubelet.sock re-created).");
  w.Sample("fabric_kubelet_restarts_total", {}, in.kubelet_restarts);
  w.Family("fabric_podresources_errors_total", "counter", "Failed PodResources List calls.");
  w.Sample("fabric_podresources_errors_total", {}, in.podresources_errors);
  w.Family("fabric_kubelet_view_complete", "gauge",
           "1 when the kubelet's view of who holds what is complete; 0 while a kubelet restart "
           "settles or PodResources List fails (holds are then kept, not lifted).");
  w.Sample("fabric_kubelet_view_complete", {}, in.kubelet_view_complete ? 1 : 0);
  w.Family("fabric_podresources_list_failing_seconds", "gauge",
           "How long PodResources List has been failing; 0 while it answers.");
  w.Sample("fabric_podresources_list_failing_seconds", {}, in.podresources_list_failing_seconds);
  w.Family("fabric_kubelet_checkpoint_readable", "gauge",
           "1 when the kubelet's device checkpoint was read in the last round.");
  w.Sample("fabric_kubelet_checkpoint_readable", {}, in.kubelet_checkpoint_readable ? 1 : 0);
  w.Family("fabric_discovery_warnings", "gauge", "Devices or files skipped by the last discovery.");
  w.Sample("fabric_discovery_warnings", {}, in.discovery_warnings);
  if (in.sampler) {
    const SamplerMetrics& s = *in.sampler;
    w.Family("fabric_sampler_rounds_total", "counter",
             "Sampling rounds taken (each reads every counter file once).");
    w.Sample("fabric_sampler_rounds_total", {}, s.rounds);
    w.Family("fabric_sampler_round_seconds", "gauge", "How long the last sampling round took.");
    w.Sample("fabric_sampler_round_seconds", "fabric_sampler_round_seconds", {},
             absl::StrCat(s.last_round_seconds));
    w.Family("fabric_sampler_last_sample_age_seconds", "gauge",
             "Age of the sample this scrape's counters come from.");
    w.Sample("fabric_sampler_last_sample_age_seconds", "fabric_sampler_last_sample_age_seconds", {},
             absl::StrCat(s.last_sample_age_seconds));
    w.Family("fabric_sampler_unreadable_devices", "gauge",
             "Devices none of whose counters could be read in the last sample.");
    w.Sample("fabric_sampler_unreadable_devices", {}, s.unreadable_devices);
    w.Family("fabric_sampler_ring_bytes", "gauge",
             "Heap held by the ring of samples the transport verdicts read: about capacity x "
             "(21 B per device + 13 B per Pod + 22 B per container using a device) plus each "
             "identity once (docs/observe.md).");
    w.Sample("fabric_sampler_ring_bytes", {}, s.ring_bytes);
  }
  return w.Text();
}

}  // namespace

std::string RenderMetrics(const MetricsInput& in) { return Render(in); }

}  // namespace fabric
