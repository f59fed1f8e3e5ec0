#include "agent/metrics/metrics.h"

#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/file_util.h"

namespace fabric {

std::string EscapeLabel(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Collects samples per family so each family's HELP/TYPE is written once and
// its samples stay together, as the text format requires.
class Writer {
 public:
  void Family(const std::string& name, const std::string& type, const std::string& help) {
    if (!families_.count(name)) {
      order_.push_back(name);
      families_[name] =
          absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
    }
  }
  void Sample(const std::string& family, const std::string& name, const Labels& labels,
              const std::string& value) {
    std::string& out = families_[family];
    out += name;
    if (!labels.empty()) {
      out += '{';
      for (size_t i = 0; i < labels.size(); ++i) {
        if (i) out += ',';
        absl::StrAppend(&out, labels[i].first, "=\"", EscapeLabel(labels[i].second), "\"");
      }
      out += '}';
    }
    absl::StrAppend(&out, " ", value, "\n");
  }
  void Sample(const std::string& name, const Labels& labels, uint64_t value) {
    Sample(name, name, labels, absl::StrCat(value));
  }
  std::string Text() const {
    std::string out;
    for (const std::string& f : order_) out += families_.at(f);
    return out;
  }

 private:
  std::vector<std::string> order_;
  std::map<std::string, std::string> families_;
};

struct Counter {
  std::string port;  // "0" for device-level
  std::string name;
  uint64_t value;
};

// Every hw counter the device exposes (device-level and per port) and the
// PMA counters/ of each port.
void ReadCounters(const HostPaths& paths, const RdmaDevice& dev, std::vector<Counter>* hw,
                  std::vector<Counter>* pma) {
  const std::string base = paths.Sys("class/infiniband/" + dev.name);
  auto read_dir = [](const std::string& dir, const std::string& port, std::vector<Counter>* out) {
    auto names = ListDir(dir);
    if (!names.ok()) return;
    for (const std::string& n : *names) {
      if (n == "lifespan") continue;  // a setting, not a counter
      auto v = ReadU64(dir + "/" + n);
      if (v.ok()) out->push_back({port, n, *v});
    }
  };
  read_dir(base + "/hw_counters", "0", hw);
  for (const PortInfo& p : dev.ports) {
    const std::string port = absl::StrCat(p.number);
    read_dir(absl::StrCat(base, "/ports/", port, "/hw_counters"), port, hw);
    read_dir(absl::StrCat(base, "/ports/", port, "/counters"), port, pma);
  }
}

bool IsPmaData(const std::string& name, std::string* direction) {
  if (name == "port_xmit_data")
    *direction = "xmit";
  else if (name == "port_rcv_data")
    *direction = "rcv";
  else
    return false;
  return true;
}

}  // namespace

std::string RenderMetrics(const MetricsInput& in, const HostPaths& paths) {
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

  std::map<std::string, std::pair<std::vector<Counter>, std::vector<Counter>>> counters;
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
    auto& [hw, pma] = counters[d.name];
    ReadCounters(paths, d, &hw, &pma);
    for (const Counter& c : hw) {
      w.Sample("fabric_hw_stat_total", {{"device", d.name}, {"port", c.port}, {"counter", c.name}},
               c.value);
    }
    for (const Counter& c : pma) {
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
    w.Sample("fabric_device_healthy", {{"device", name}, {"reason", h.healthy ? "" : h.reason}},
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
    const Labels pod = {{"namespace", hold.ns},
                        {"pod", hold.pod},
                        {"container", hold.container},
                        {"device", hold.device}};
    for (const Counter& c : it->second.first) {
      Labels l = pod;
      l.push_back({"port", c.port});
      l.push_back({"counter", c.name});
      w.Sample("fabric_pod_hw_stat_total", l, c.value);
    }
    for (const Counter& c : it->second.second) {
      std::string dir;
      if (!IsPmaData(c.name, &dir)) continue;
      Labels l = pod;
      l.push_back({"port", c.port});
      l.push_back({"direction", dir});
      w.Sample("fabric_pod_port_data_bytes_total", l, c.value * 4);
    }
  }

  w.Family("fabric_kubelet_restarts_total", "counter",
           "Kubelet restarts seen (kubelet.sock re-created).");
  w.Sample("fabric_kubelet_restarts_total", {}, in.kubelet_restarts);
  w.Family("fabric_podresources_errors_total", "counter", "Failed PodResources List calls.");
  w.Sample("fabric_podresources_errors_total", {}, in.podresources_errors);
  w.Family("fabric_discovery_warnings", "gauge", "Devices or files skipped by the last discovery.");
  w.Sample("fabric_discovery_warnings", {}, in.discovery_warnings);
  return w.Text();
}

}  // namespace fabric
