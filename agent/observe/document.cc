#include "agent/observe/document.h"

#include <cmath>

#include "agent/base/json_text.h"

namespace fabric::observe {
namespace {

// Written straight into the text: a list of hundreds of Pods is rendered in
// a few milliseconds, with no tree of JSON values on the way.
void UintOrNull(JsonWriter& w, const std::optional<uint64_t>& v) {
  if (v) {
    w.Uint(*v);
  } else {
    w.Null();
  }
}

// Seconds to the millisecond: the samples' spacing, not the clock's noise.
double Millis(double seconds) { return std::round(seconds * 1000) / 1000; }

void Strings(JsonWriter& w, const std::vector<std::string>& list) {
  w.BeginArray();
  for (const std::string& s : list) w.String(s);
  w.EndArray();
}

void WindowJson(JsonWriter& w, const WindowResult& r) {
  const WindowBounds& b = r.window;
  w.BeginObject();
  w.Key("start").StringOrNull(b.samples ? Rfc3339(b.start) : "");
  w.Key("end").StringOrNull(b.samples ? Rfc3339(b.end) : "");
  w.Key("requested_seconds").Double(absl::ToDoubleSeconds(b.requested));
  w.Key("samples").Uint(b.samples);
  w.Key("shorter").Bool(b.shorter);
  w.EndObject();
}

void DeviceJson(JsonWriter& w, const DeviceObservation& d) {
  w.BeginObject();
  w.Key("device").String(d.device);
  w.Key("resource").String(d.resource);
  w.Key("kind").String(DeviceKindName(d.kind));
  w.Key("owned").BeginObject();
  w.Key("qp").Uint(d.owned.qp);
  w.Key("qp_active").Uint(d.owned.qp_active);
  w.Key("cq").Uint(d.owned.cq);
  w.Key("mr").Uint(d.owned.mr);
  w.Key("mr_bytes").Uint(d.owned.mr_bytes);
  w.Key("pd").Uint(d.owned.pd);
  w.EndObject();
  w.Key("fabric_bytes");
  UintOrNull(w, d.fabric_bytes);
  w.Key("fabric_packets");
  UintOrNull(w, d.fabric_packets);
  w.Key("attribution").String(AttributionName(d.attribution));
  w.Key("holders");
  Strings(w, d.holders);
  w.Key("granted").Bool(d.granted);
  w.Key("counts_packets").Bool(d.counts_packets);
  w.EndObject();
}

void ContainerJson(JsonWriter& w, const ContainerObservation& c) {
  w.BeginObject();
  w.Key("name").String(c.name);
  w.Key("verdict").String(VerdictName(c.verdict));
  w.Key("attribution").String(AttributionName(c.attribution));
  w.Key("fabric_bytes");
  UintOrNull(w, c.fabric_bytes);
  w.Key("other_bytes");
  UintOrNull(w, c.other_bytes);
  w.Key("devices").BeginArray();
  for (const DeviceObservation& d : c.devices) DeviceJson(w, d);
  w.EndArray();
  w.Key("evidence");
  Strings(w, c.evidence);
  w.Key("fabric_packets");
  UintOrNull(w, c.fabric_packets);
  w.Key("fallback").Bool(c.fallback);
  w.Key("reason").StringOrNull(c.reason);
  w.Key("granted").Bool(c.granted);
  w.Key("host_network").Bool(c.host_network);
  w.Key("container_ids");
  Strings(w, c.container_ids);
  w.Key("last_non_idle");
  if (c.last_non_idle) {
    w.BeginObject();
    w.Key("verdict").String(VerdictName(*c.last_non_idle));
    w.Key("at").String(Rfc3339(c.last_non_idle_at));
    w.EndObject();
  } else {
    w.Null();
  }
  w.EndObject();
}

void PodJson(JsonWriter& w, const PodObservation& pod, const WindowResult& r) {
  w.BeginObject();
  w.Key("apiVersion").String(kApiVersion);
  w.Key("kind").String(kPodKind);
  w.Key("namespace").String(pod.ns);
  w.Key("pod").String(pod.pod);
  w.Key("window_seconds").Double(Millis(r.window.seconds));
  w.Key("containers").BeginArray();
  for (const ContainerObservation& c : pod.containers) ContainerJson(w, c);
  w.EndArray();
  w.Key("pod_uid").String(pod.pod_uid);
  w.Key("host_network").Bool(pod.host_network);
  w.Key("window");
  WindowJson(w, r);
  w.Key("floor_bytes").Uint(r.floor_bytes);
  w.Key("floor_packets").Uint(r.floor_packets);
  w.EndObject();
}

}  // namespace

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

std::string PodDocument(const PodObservation& pod, const WindowResult& r) {
  std::string out;
  JsonWriter w(&out);
  PodJson(w, pod, r);
  out.push_back('\n');
  return out;
}

std::string ListDocument(const WindowResult& r) {
  std::string out;
  // About 1.4 KiB per Pod: one allocation for most lists.
  out.reserve(1024 + 1536 * r.pods.size());
  JsonWriter w(&out);
  w.BeginObject();
  w.Key("apiVersion").String(kApiVersion);
  w.Key("kind").String(kListKind);
  w.Key("window_seconds").Double(Millis(r.window.seconds));
  w.Key("window");
  WindowJson(w, r);
  w.Key("floor_bytes").Uint(r.floor_bytes);
  w.Key("floor_packets").Uint(r.floor_packets);
  w.Key("items").BeginArray();
  for (const PodObservation& p : r.pods) PodJson(w, p, r);
  w.EndArray();
  w.EndObject();
  out.push_back('\n');
  return out;
}

}  // namespace fabric::observe
