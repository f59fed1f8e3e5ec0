#include "agent/dra_front/claim_holds.h"

#include <utility>

#include "agent/base/json_text.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/base/utf8.h"
#include "agent/kubeapi/api_status.h"

namespace fabric::dra {

ClaimHolds::ClaimHolds(ClaimHoldsOptions options, kubeapi::KubeClient* client,
                       std::function<DraNames()> names,
                       std::function<void(const holds::KubeletView&)> on_view)
    : options_(std::move(options)),
      client_(client),
      names_(std::move(names)),
      on_view_(std::move(on_view)) {}

std::optional<ClaimHolds::Claim> ClaimHolds::Parse(const nlohmann::json& obj, std::string* uid) {
  if (!obj.is_object()) return std::nullopt;
  const std::string ns = StringAt(obj, {"metadata", "namespace"});
  const std::string name = StringAt(obj, {"metadata", "name"});
  *uid = StringAt(obj, {"metadata", "uid"});
  if (uid->empty()) return std::nullopt;
  absl::StatusOr<ClaimAllocation> alloc =
      ClaimAllocationFromJson(obj, ns, name, *uid, options_.driver, options_.node_name);
  if (!alloc.ok()) {
    // Not allocated, another driver's or another node's: not ours. Anything
    // else is a claim we cannot read, counted and named once.
    if (alloc.status().code() != absl::StatusCode::kFailedPrecondition) {
      std::lock_guard<std::mutex> lock(mu_);
      ++status_.rejected;
      LogWarn(Component::kDra, "ResourceClaim ignored: {}", alloc.status().message());
    }
    return std::nullopt;
  }
  Claim c;
  c.ns = alloc->claim_namespace;
  c.name = alloc->name;
  for (const AllocationResult& r : alloc->results) c.devices.push_back(r.device);
  if (auto st = obj.find("status"); st != obj.end() && st->is_object()) {
    if (auto rf = st->find("reservedFor"); rf != st->end() && rf->is_array()) {
      for (const nlohmann::json& r : *rf) {
        if (!r.is_object() || r.value("resource", "") != "pods") continue;
        const std::string pod = r.value("name", "");
        const std::string pod_uid = r.value("uid", "");
        if (CheckExternalName("reservedFor name", pod, 253).ok() &&
            CheckExternalName("reservedFor uid", pod_uid, 128).ok()) {
          c.pods.emplace_back(pod, pod_uid);
        }
      }
    }
  }
  return c;
}

void ClaimHolds::OnList(const kubeapi::ObjectList& list) {
  std::map<std::string, Claim> next;
  for (const nlohmann::json& obj : list.items) {
    std::string uid;
    if (std::optional<Claim> c = Parse(obj, &uid)) next[uid] = std::move(*c);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    claims_ = std::move(next);
    status_.listed = true;
    status_.claims = claims_.size();
    status_.last_error.clear();
  }
  Publish();
}

void ClaimHolds::OnEvent(const kubeapi::WatchEvent& event) {
  std::string uid;
  std::optional<Claim> c;
  if (event.type != kubeapi::WatchEvent::Type::kDeleted) c = Parse(event.object, &uid);
  if (uid.empty()) uid = StringAt(event.object, {"metadata", "uid"});
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++status_.events;
    if (c) {
      claims_[uid] = std::move(*c);
    } else if (claims_.erase(uid) == 0) {
      return;  // neither was nor is ours: the holds did not change
    }
    status_.claims = claims_.size();
  }
  Publish();
}

void ClaimHolds::OnError(const absl::Status& error, absl::Duration retry_in) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    status_.last_error = std::string(error.message());
  }
  LogWarn(Component::kDra, "ResourceClaim watch: {} (retry in {})", error.message(),
          absl::FormatDuration(retry_in));
}

absl::StatusOr<ClaimAllocation> ClaimHolds::Get(const std::string& claim_namespace,
                                                const std::string& name, const std::string& uid) {
  absl::StatusOr<std::string> path =
      kubeapi::ObjectPath("/apis/resource.k8s.io/v1", "resourceclaims", claim_namespace, name);
  if (!path.ok()) return path.status();
  absl::StatusOr<nlohmann::json> obj = client_->Get(*path);
  if (!obj.ok()) return obj.status();
  return ClaimAllocationFromJson(*obj, claim_namespace, name, uid, options_.driver,
                                 options_.node_name);
}

holds::KubeletView ClaimHolds::View() const {
  const DraNames names = names_();
  holds::KubeletView view;
  view.observed_at = MonotonicNow();
  std::lock_guard<std::mutex> lock(mu_);
  // Until the first List the view may miss holds: the registry then keeps
  // what it knew and releases nothing.
  view.complete = status_.listed;
  if (!view.complete) view.incomplete_reason = "ResourceClaims not listed yet";
  for (const auto& [uid, c] : claims_) {
    // One entry per (Pod, resource); a claim reserved for no Pod yet holds
    // its devices in its own name (the scheduler allocated them).
    std::map<std::string, std::vector<std::string>> by_resource;
    for (const std::string& d : c.devices) {
      if (const PublishedUnit* u = names.Lookup(d)) by_resource[u->resource].push_back(u->unit_id);
    }
    std::vector<std::pair<std::string, std::string>> pods = c.pods;
    if (pods.empty()) pods.emplace_back("", uid);
    for (const auto& [pod, pod_uid] : pods) {
      for (const auto& [resource, ids] : by_resource) {
        podresources::PodDevices e;
        e.ns = c.ns;
        e.pod = pod;
        e.container = "claim:" + c.name;
        e.resource = resource;
        e.device_ids = ids;
        e.pod_uid = pod_uid;
        view.entries.push_back(std::move(e));
      }
    }
  }
  return view;
}

void ClaimHolds::Publish() {
  if (on_view_) on_view_(View());
}

void ClaimHolds::Republish() { Publish(); }

ClaimHoldsStatus ClaimHolds::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

}  // namespace fabric::dra
