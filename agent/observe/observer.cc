#include "agent/observe/observer.h"

#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/base/json_text.h"
#include "agent/base/prometheus_text.h"
#include "agent/base/utf8.h"
#include "agent/observe/document.h"

namespace fabric::observe {
namespace {

bool Remembered(Verdict v) {
  return v == Verdict::kEfa || v == Verdict::kRdma || v == Verdict::kTcp;
}

HttpAnswer JsonError(int status, absl::string_view message) {
  return HttpAnswer{status, "application/json",
                    DumpJson(nlohmann::json{{"error", std::string(message)}}) + "\n"};
}

int HttpStatusOf(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

}  // namespace

TransportObserver::TransportObserver(ObserverOptions options) : options_(std::move(options)) {}

TransportObserver::ContainerKey TransportObserver::KeyOf(const PodObservation& p,
                                                         const ContainerObservation& c) {
  return {p.pod_uid, absl::StrCat(p.ns, "/", p.pod), c.name};
}

void TransportObserver::OnSample(const std::vector<sampler::SamplePtr>& ring) {
  auto result = std::make_shared<WindowResult>(
      EvaluateWindow(ring, options_.default_window, options_.transport));
  std::lock_guard<std::mutex> lock(mu_);
  ring_ = ring;
  // Remember, then forget containers no longer of interest (bounded state).
  std::map<ContainerKey, LastNonIdle> kept;
  for (const PodObservation& p : result->pods) {
    for (const ContainerObservation& c : p.containers) {
      const ContainerKey key = KeyOf(p, c);
      if (Remembered(c.verdict)) {
        kept[key] = LastNonIdle{c.verdict, result->window.end};
      } else if (auto it = last_non_idle_.find(key); it != last_non_idle_.end()) {
        kept[key] = it->second;
      }
    }
  }
  last_non_idle_ = std::move(kept);
  FillLastNonIdle(*result);
  current_ = std::move(result);
}

void TransportObserver::FillLastNonIdle(WindowResult& r) const {
  for (PodObservation& p : r.pods) {
    for (ContainerObservation& c : p.containers) {
      auto it = last_non_idle_.find(KeyOf(p, c));
      if (it == last_non_idle_.end()) continue;
      c.last_non_idle = it->second.verdict;
      c.last_non_idle_at = it->second.at;
    }
  }
}

absl::StatusOr<std::shared_ptr<const WindowResult>> TransportObserver::Result(
    absl::string_view window) const {
  std::optional<absl::Duration> length;
  if (!window.empty()) {
    auto parsed = ParseWindow(window);
    if (!parsed.ok()) return parsed.status();
    if (*parsed != options_.default_window) length = *parsed;
  }
  std::vector<sampler::SamplePtr> ring;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!current_) {
      return absl::UnavailableError("no sample yet: the observer has not completed a round");
    }
    if (!length) return current_;
    ring = ring_;
  }
  auto result = std::make_shared<WindowResult>(EvaluateWindow(ring, *length, options_.transport));
  std::lock_guard<std::mutex> lock(mu_);
  FillLastNonIdle(*result);
  return result;
}

std::optional<WindowResult> TransportObserver::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!current_) return std::nullopt;
  return *current_;
}

absl::StatusOr<std::string> TransportObserver::PodsJson(absl::string_view window) const {
  auto r = Result(window);
  if (!r.ok()) return r.status();
  return DumpJson(ListDocument(**r)) + "\n";
}

absl::StatusOr<std::string> TransportObserver::PodJson(const std::string& ns,
                                                       const std::string& pod,
                                                       absl::string_view window) const {
  auto r = Result(window);
  if (!r.ok()) return r.status();
  for (const PodObservation& p : (*r)->pods) {
    if (!p.pod.empty() && p.ns == ns && p.pod == pod) return DumpJson(PodDocument(p, **r)) + "\n";
  }
  // Not of interest (no grant, no fabric resource): a Pod that only mounts
  // the devices by hostPath still gets its verdict when its runtime names it.
  std::vector<sampler::SamplePtr> ring;
  absl::Duration length = options_.default_window;
  if (!window.empty()) length = *ParseWindow(window);  // parsed by Result() above
  {
    std::lock_guard<std::mutex> lock(mu_);
    ring = ring_;
  }
  TransportOptions named = options_.transport;
  named.named_ns = ns;
  named.named_pod = pod;
  WindowResult one = EvaluateWindow(ring, length, named);
  for (const PodObservation& p : one.pods) {
    if (p.ns == ns && p.pod == pod) return DumpJson(PodDocument(p, one)) + "\n";
  }
  return absl::NotFoundError(
      absl::StrCat("no Pod ", EscapeBytes(ns, 253), "/", EscapeBytes(pod, 253),
                   " holds a fabric grant or owns fabric resources on this node, and no container "
                   "runtime record names it (--runtime-state-dir)"));
}

std::string TransportObserver::MetricsText() const {
  std::shared_ptr<const WindowResult> r;
  {
    std::lock_guard<std::mutex> lock(mu_);
    r = current_;
  }
  const std::string window = absl::StrCat(absl::ToInt64Seconds(options_.default_window));
  std::string transport = absl::StrCat(
      "# HELP fabric_pod_transport The transport observed over the last ", window,
      " s for each container that holds a fabric grant or owns fabric resources: 1 on its one "
      "series, whose observed label is the verdict (efa, rdma, tcp, idle, unknown). One series "
      "per container, so cardinality is bounded by the node's containers.\n"
      "# TYPE fabric_pod_transport gauge\n");
  std::string fallback =
      "# HELP fabric_pod_transport_fallback 1 when the container's observed transport is tcp "
      "while a fabric device is granted to it (a fallback), else 0.\n"
      "# TYPE fabric_pod_transport_fallback gauge\n";
  if (r) {
    // A Pod re-created under the same name may show twice (old UID still in
    // the kubelet's checkpoint): one series per name, the first in order.
    std::set<std::tuple<std::string, std::string, std::string>> seen;
    for (const PodObservation& p : r->pods) {
      if (p.pod.empty()) continue;  // per-Pod series only for Pods with a name
      for (const ContainerObservation& c : p.containers) {
        if (!seen.insert({p.ns, p.pod, c.name}).second) continue;
        std::string labels = "namespace=\"";
        AppendPrometheusLabelValue(&labels, p.ns);
        labels += "\",pod=\"";
        AppendPrometheusLabelValue(&labels, p.pod);
        labels += "\",container=\"";
        AppendPrometheusLabelValue(&labels, c.name);
        labels += "\"";
        absl::StrAppend(&transport, "fabric_pod_transport{", labels, ",observed=\"",
                        VerdictName(c.verdict), "\"} 1\n");
        absl::StrAppend(&fallback, "fabric_pod_transport_fallback{", labels, "} ",
                        c.fallback ? 1 : 0, "\n");
      }
    }
  }
  return transport + fallback;
}

HttpAnswer TransportObserver::ServeHttp(const std::string& path, const std::string& query) const {
  std::string window;
  for (absl::string_view kv : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first == "window") {
      window = std::string(p.second);
      if (window.empty()) return JsonError(400, "window: empty (examples: 60s, 2m, 1m30s, 90)");
    }
  }
  absl::StatusOr<std::string> body;
  constexpr absl::string_view kPrefix = "/v1/pods";
  absl::string_view rest = path;
  if (!absl::ConsumePrefix(&rest, kPrefix) || (!rest.empty() && rest[0] != '/')) {
    return JsonError(404, "not found");
  }
  if (rest.empty() || rest == "/") {
    body = PodsJson(window);
  } else {
    std::vector<absl::string_view> parts = absl::StrSplit(rest.substr(1), '/');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return JsonError(404, "expected /v1/pods or /v1/pods/{namespace}/{pod}");
    }
    body = PodJson(std::string(parts[0]), std::string(parts[1]), window);
  }
  if (!body.ok()) return JsonError(HttpStatusOf(body.status()), body.status().message());
  return HttpAnswer{200, "application/json", std::move(*body)};
}

}  // namespace fabric::observe
