#include "agent/observe/document.h"

#include <cmath>

namespace fabric::observe {
namespace {

using Json = nlohmann::ordered_json;

Json OrNull(const std::optional<uint64_t>& v) { return v ? Json(*v) : Json(nullptr); }

// Seconds to the millisecond: the samples' spacing, not the clock's noise.
double Millis(double seconds) { return std::round(seconds * 1000) / 1000; }

Json WindowJson(const WindowResult& r) {
  const WindowBounds& w = r.window;
  return Json{{"start", w.samples ? Json(Rfc3339(w.start)) : Json(nullptr)},
              {"end", w.samples ? Json(Rfc3339(w.end)) : Json(nullptr)},
              {"requested_seconds", absl::ToDoubleSeconds(w.requested)},
              {"samples", w.samples},
              {"shorter", w.shorter}};
}

Json DeviceJson(const DeviceObservation& d) {
  Json holders = Json::array();
  for (const std::string& h : d.holders) holders.push_back(h);
  return Json{{"device", d.device},
              {"resource", d.resource},
              {"kind", std::string(DeviceKindName(d.kind))},
              {"owned",
               {{"qp", d.owned.qp},
                {"qp_active", d.owned.qp_active},
                {"cq", d.owned.cq},
                {"mr", d.owned.mr},
                {"mr_bytes", d.owned.mr_bytes},
                {"pd", d.owned.pd}}},
              {"fabric_bytes", OrNull(d.fabric_bytes)},
              {"fabric_packets", OrNull(d.fabric_packets)},
              {"attribution", AttributionName(d.attribution)},
              {"holders", holders},
              {"granted", d.granted},
              {"counts_packets", d.counts_packets}};
}

Json ContainerJson(const ContainerObservation& c) {
  Json devices = Json::array();
  for (const DeviceObservation& d : c.devices) devices.push_back(DeviceJson(d));
  Json evidence = Json::array();
  for (const std::string& e : c.evidence) evidence.push_back(e);
  Json ids = Json::array();
  for (const std::string& id : c.container_ids) ids.push_back(id);
  Json last = nullptr;
  if (c.last_non_idle) {
    last = Json{{"verdict", VerdictName(*c.last_non_idle)}, {"at", Rfc3339(c.last_non_idle_at)}};
  }
  return Json{{"name", c.name},
              {"verdict", VerdictName(c.verdict)},
              {"attribution", AttributionName(c.attribution)},
              {"fabric_bytes", OrNull(c.fabric_bytes)},
              {"other_bytes", OrNull(c.other_bytes)},
              {"devices", devices},
              {"evidence", evidence},
              {"fabric_packets", OrNull(c.fabric_packets)},
              {"fallback", c.fallback},
              {"reason", c.reason.empty() ? Json(nullptr) : Json(c.reason)},
              {"granted", c.granted},
              {"host_network", c.host_network},
              {"container_ids", ids},
              {"last_non_idle", last}};
}

}  // namespace

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

Json PodDocument(const PodObservation& pod, const WindowResult& r) {
  Json containers = Json::array();
  for (const ContainerObservation& c : pod.containers) containers.push_back(ContainerJson(c));
  return Json{{"apiVersion", kApiVersion},
              {"kind", kPodKind},
              {"namespace", pod.ns},
              {"pod", pod.pod},
              {"window_seconds", Millis(r.window.seconds)},
              {"containers", containers},
              {"pod_uid", pod.pod_uid},
              {"host_network", pod.host_network},
              {"window", WindowJson(r)},
              {"floor_bytes", r.floor_bytes},
              {"floor_packets", r.floor_packets}};
}

Json ListDocument(const WindowResult& r) {
  Json items = Json::array();
  for (const PodObservation& p : r.pods) items.push_back(PodDocument(p, r));
  return Json{{"apiVersion", kApiVersion},
              {"kind", kListKind},
              {"window_seconds", Millis(r.window.seconds)},
              {"window", WindowJson(r)},
              {"floor_bytes", r.floor_bytes},
              {"floor_packets", r.floor_packets},
              {"items", items}};
}

}  // namespace fabric::observe
