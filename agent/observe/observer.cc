#include "agent/observe/observer.h"

#include <algorithm>
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
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

}  // namespace

TransportObserver::TransportObserver(ObserverOptions options, RingReader ring)
    : options_(std::move(options)), ring_(std::move(ring)) {}

TransportObserver::ContainerKey TransportObserver::KeyOf(const PodObservation& p,
                                                         const ContainerObservation& c) {
  return {p.pod_uid, absl::StrCat(p.ns, "/", p.pod), c.name};
}

void TransportObserver::OnSample(const sampler::SampleRing& ring) {
  auto result = std::make_shared<WindowResult>(
      EvaluateWindow(ring, options_.default_window, options_.transport));
  std::lock_guard<std::mutex> lock(mu_);
  rendered_.clear();
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
  evaluated_.clear();
  evaluations_this_sample_ = 0;
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
  if (!length) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!current_) {
      return absl::UnavailableError("no sample yet: the observer has not completed a round");
    }
    return current_;
  }
  return Evaluated(*length, options_.transport, absl::StrCat(absl::ToInt64Milliseconds(*length)));
}

absl::StatusOr<std::shared_ptr<const WindowResult>> TransportObserver::Evaluated(
    absl::Duration length, const TransportOptions& transport, const std::string& key) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!current_) {
      return absl::UnavailableError("no sample yet: the observer has not completed a round");
    }
    if (auto it = evaluated_.find(key); it != evaluated_.end()) return it->second;
    if (!ring_) return absl::UnavailableError("this observer evaluates the default window only");
    if (evaluations_this_sample_ >= options_.max_evaluations_per_sample) {
      ++refused_total_;
      return absl::ResourceExhaustedError(absl::StrCat(
          "this agent evaluates at most ", options_.max_evaluations_per_sample,
          " windows other than the default per sample period; ask a window asked already, or "
          "again after the next sample"));
    }
    ++evaluations_this_sample_;
    ++evaluations_total_;
  }
  auto result = std::make_shared<WindowResult>();
  ring_(
      [&](const sampler::SampleRing& ring) { *result = EvaluateWindow(ring, length, transport); });
  std::lock_guard<std::mutex> lock(mu_);
  FillLastNonIdle(*result);
  // Kept for this sample only: OnSample clears the cache (a sample taken
  // meanwhile may have cleared it already: then this stays uncached).
  if (current_ && result->window.end == current_->window.end) evaluated_[key] = result;
  return std::shared_ptr<const WindowResult>(std::move(result));
}

std::shared_ptr<const WindowResult> TransportObserver::CurrentResult() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

std::optional<WindowResult> TransportObserver::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!current_) return std::nullopt;
  return *current_;
}

absl::StatusOr<std::string> TransportObserver::PodsJson(absl::string_view window) const {
  auto r = Result(window);
  if (!r.ok()) return r.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = rendered_.find(r->get()); it != rendered_.end()) return *it->second;
  }
  // Rendered outside the lock and kept until the next sample, so a client
  // polling /v1/pods renders each window's list once per period.
  auto body = std::make_shared<const std::string>(ListDocument(**r));
  std::lock_guard<std::mutex> lock(mu_);
  const bool kept = *r == current_ || std::any_of(evaluated_.begin(), evaluated_.end(),
                                                  [&](const auto& e) { return e.second == *r; });
  if (kept) rendered_[r->get()] = body;
  return *body;
}

absl::StatusOr<std::string> TransportObserver::PodJson(const std::string& ns,
                                                       const std::string& pod,
                                                       absl::string_view window) const {
  auto r = Result(window);
  if (!r.ok()) return r.status();
  for (const PodObservation& p : (*r)->pods) {
    if (!p.pod.empty() && p.ns == ns && p.pod == pod) return PodDocument(p, **r);
  }
  // Not of interest (no grant, no fabric resource): a Pod that only mounts
  // the devices by hostPath still gets its verdict when its runtime names it.
  absl::Duration length = options_.default_window;
  if (!window.empty()) length = *ParseWindow(window);  // parsed by Result() above
  TransportOptions named = options_.transport;
  named.named_ns = ns;
  named.named_pod = pod;
  auto one =
      Evaluated(length, named, absl::StrCat(absl::ToInt64Milliseconds(length), " ", ns, "/", pod));
  if (!one.ok()) return one.status();
  for (const PodObservation& p : (*one)->pods) {
    if (p.ns == ns && p.pod == pod) return PodDocument(p, **one);
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
    // A Pod re-created under the same name may show twice (the old UID still
    // in the kubelet's checkpoint): one series per name, the live Pod's (the
    // one whose processes are visible), else the first in order.
    std::map<std::tuple<std::string, std::string, std::string>, const ContainerObservation*> series;
    std::map<std::tuple<std::string, std::string, std::string>, bool> series_live;
    for (const PodObservation& p : r->pods) {
      if (p.pod.empty()) continue;  // per-Pod series only for Pods with a name
      for (const ContainerObservation& c : p.containers) {
        const auto key = std::make_tuple(p.ns, p.pod, c.name);
        auto [it, added] = series.try_emplace(key, &c);
        if (!added && p.live && !series_live[key]) it->second = &c;
        series_live[key] = series_live[key] || p.live;
      }
    }
    for (const auto& [key, c] : series) {
      const auto& [ns, pod, name] = key;
      std::string labels = "namespace=\"";
      AppendPrometheusLabelValue(&labels, ns);
      labels += "\",pod=\"";
      AppendPrometheusLabelValue(&labels, pod);
      labels += "\",container=\"";
      AppendPrometheusLabelValue(&labels, name);
      labels += "\"";
      absl::StrAppend(&transport, "fabric_pod_transport{", labels, ",observed=\"",
                      VerdictName(c->verdict), "\"} 1\n");
      absl::StrAppend(&fallback, "fabric_pod_transport_fallback{", labels, "} ",
                      c->fallback ? 1 : 0, "\n");
    }
  }
  uint64_t evaluations = 0, refused = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    evaluations = evaluations_total_;
    refused = refused_total_;
  }
  absl::StrAppend(
      &fallback,
      "# HELP fabric_observe_window_evaluations_total Evaluations of a window other than the "
      "default (or of a Pod asked for by name) for /v1/pods; each is cached until the next "
      "sample.\n"
      "# TYPE fabric_observe_window_evaluations_total counter\n"
      "fabric_observe_window_evaluations_total ",
      evaluations,
      "\n"
      "# HELP fabric_observe_window_evaluations_refused_total /v1/pods requests answered 429: "
      "they asked for more distinct windows in one sample period than the agent evaluates.\n"
      "# TYPE fabric_observe_window_evaluations_refused_total counter\n"
      "fabric_observe_window_evaluations_refused_total ",
      refused, "\n");
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
  if (!body.ok()) {
    HttpAnswer a = JsonError(HttpStatusOf(body.status()), body.status().message());
    if (body.status().code() == absl::StatusCode::kResourceExhausted) {
      // When the next sample (and an empty budget) is due, at the latest.
      a.body = DumpJson(nlohmann::json{
                   {"error", std::string(body.status().message())},
                   {"retry_after_seconds",
                    std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(options_.sample_period,
                                                                         absl::Seconds(1))))}}) +
               "\n";
    }
    return a;
  }
  return HttpAnswer{200, "application/json", std::move(*body)};
}

}  // namespace fabric::observe
