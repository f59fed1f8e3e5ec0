#include "agent/cni_service/cni_service.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "agent/base/status_macros.h"
#include "agent/netns/netns_path.h"

namespace fabric::cni_service {
namespace {

using netns::NetnsMode;

agentpb::DeviceAttachment::Action ToProto(DeviceAction a) {
  switch (a) {
    case DeviceAction::kAttributed:
      return agentpb::DeviceAttachment::ATTRIBUTED;
    case DeviceAction::kMoved:
      return agentpb::DeviceAttachment::MOVED;
    case DeviceAction::kNotMovedEfa:
      return agentpb::DeviceAttachment::NOT_MOVED_EFA;
    case DeviceAction::kNotMovedSharedToken:
      return agentpb::DeviceAttachment::NOT_MOVED_SHARED_TOKEN;
  }
  return agentpb::DeviceAttachment::ACTION_UNSPECIFIED;
}

agentpb::CniResponse ToResponse(const AttachmentRecord& rec) {
  agentpb::CniResponse resp;
  for (const auto& w : rec.warnings) resp.add_warnings(w);
  for (const auto& d : rec.devices) {
    auto* out = resp.add_devices();
    out->set_resource(d.resource);
    out->set_device_id(d.device_id);
    out->set_rdma_device(d.rdma_device);
    out->set_container(d.container);
    out->set_action(ToProto(d.action));
    out->set_detail(d.detail);
  }
  resp.set_netns_mode(rec.netns_mode);
  return resp;
}

AttachmentKey KeyOf(const agentpb::CniRequest& req) {
  return AttachmentKey{req.network_name(), req.container_id(), req.ifname()};
}

std::string PodName(const std::string& ns, const std::string& pod) {
  return absl::StrCat(ns, "/", pod);
}

std::string DeviceLabel(const AttachedDevice& d) {
  return absl::StrCat(d.rdma_device, " (", d.resource, " ", d.device_id, ")");
}

bool HasMoves(const std::vector<AttachedDevice>& devices) {
  for (const auto& d : devices) {
    if (d.action == DeviceAction::kMoved) return true;
  }
  return false;
}

absl::Status Validate(const agentpb::CniRequest& req) {
  if (req.container_id().empty()) return absl::InvalidArgumentError("container_id is empty");
  if (req.ifname().empty()) return absl::InvalidArgumentError("ifname is empty");
  return absl::OkStatus();
}

}  // namespace

CniService::CniService(const HostPaths& paths, podresources::PodResourcesSource* pod_resources,
                       const DeviceResolver* resolver, netns::RdmaNetlink* rdma)
    : pod_resources_(pod_resources),
      resolver_(resolver),
      rdma_(rdma),
      store_(paths.state_dir + "/cni"),
      netns_check_(netns::CheckNetnsPath) {}

absl::Status CniService::CheckNetns(const std::string& path) const {
  if (path.empty()) return absl::OkStatus();
  absl::Status s = netns_check_(path);
  if (s.ok()) return s;
  return absl::InvalidArgumentError(absl::StrCat("CNI_NETNS: ", s.message()));
}

absl::StatusOr<std::vector<podresources::PodDevices>> CniService::FetchAllocations(
    const std::string& ns, const std::string& pod) {
  auto allocations = pod_resources_->GetPodDevices(ns, pod);
  if (allocations.ok()) return allocations;
  if (absl::IsNotFound(allocations.status())) {
    LogWarn(Component::kCni, "Pod {} unknown to the kubelet PodResources API: {}; no devices",
            PodName(ns, pod), allocations.status().ToString());
    return std::vector<podresources::PodDevices>();
  }
  return absl::UnavailableError(absl::StrCat("cannot read Pod ", PodName(ns, pod),
                                             "'s devices from the kubelet PodResources API: ",
                                             allocations.status().message(), "; retry later"));
}

absl::StatusOr<CniService::Plan> CniService::PlanFrom(
    const std::vector<podresources::PodDevices>& allocations) {
  Plan plan;
  for (const auto& alloc : allocations) {
    for (const auto& id : alloc.device_ids) {
      auto granted = resolver_->Resolve(alloc.resource, id);
      if (!granted) continue;  // not one of ours
      AttachedDevice d{
          alloc.container, alloc.resource, id, granted->rdma_device, DeviceAction::kAttributed, ""};
      // Stash the flags in `detail` until the mode is known.
      d.detail = granted->efa ? "efa" : (granted->exclusive ? "" : "shared-token");
      plan.devices.push_back(std::move(d));
    }
  }
  if (plan.devices.empty()) return plan;

  // Only an exclusively allocated, non-EFA device is ever moved, and only the
  // RDMA netns mode says whether it must be. A Pod holding only EFA devices and
  // shared tokens needs nothing from RDMA netlink: a kernel without it, or one
  // where it cannot be read, must not fail its ADD.
  bool movable = false;
  for (const auto& d : plan.devices) movable = movable || d.detail.empty();
  auto mode = rdma_->GetNetnsMode();
  if (!mode.ok() && movable) {
    return absl::UnavailableError(
        absl::StrCat("cannot read the RDMA netns mode (rdma system): ", mode.status().message()));
  }
  if (!mode.ok()) {
    plan.mode_name = "unknown";
    plan.warnings.push_back(absl::StrCat(
        "RDMA netns mode unknown (", mode.status().message(),
        "); this Pod holds only EFA devices and shared tokens, which are never moved"));
  } else {
    plan.mode_name = netns::NetnsModeName(*mode);
  }
  std::set<std::string> moving;
  for (auto& d : plan.devices) {
    std::string flag = std::exchange(d.detail, "");
    if (mode.ok() && *mode == NetnsMode::kShared) {
      d.action = DeviceAction::kAttributed;
      d.detail = "shared RDMA netns mode: device visible in every netns, nothing moved";
    } else if (flag == "efa") {
      d.action = DeviceAction::kNotMovedEfa;
      d.detail =
          "EFA cannot be moved into a netns (the driver lacks netns support); in exclusive RDMA "
          "netns mode the Pod gets EPERM opening it: run EFA nodes in shared mode "
          "(rdma system set netns shared)";
      plan.warnings.push_back(
          absl::StrCat("RDMA device ", DeviceLabel(d), " not moved: ", d.detail));
    } else if (flag == "shared-token") {
      d.action = DeviceAction::kNotMovedSharedToken;
      d.detail =
          "a shared token (other Pods use the same device) is never moved; in exclusive RDMA "
          "netns mode it stays in the host netns and this Pod cannot use it";
      plan.warnings.push_back(
          absl::StrCat("RDMA device ", DeviceLabel(d), " not moved: ", d.detail));
    } else if (!moving.insert(d.rdma_device).second) {
      d.action = DeviceAction::kAttributed;
      d.detail = "same RDMA device as another device ID of this Pod; moved once";
    } else {
      d.action = DeviceAction::kMoved;
      d.detail = "moved into the Pod netns";
    }
  }
  return plan;
}

bool CniService::InHost(const std::string& device) {
  auto links = rdma_->ListDevices("");
  if (!links.ok()) return false;
  for (const auto& l : *links) {
    if (l.name == device) return true;
  }
  return false;
}

absl::StatusOr<bool> CniService::Release(const AttachmentRecord& rec,
                                         std::vector<std::string>* warnings) {
  bool all_back = true;
  bool netns_exists = !rec.netns.empty() && PathExists(rec.netns);
  for (const auto& d : rec.devices) {
    if (d.action != DeviceAction::kMoved) continue;
    if (netns_exists) {
      absl::Status s = rdma_->MoveDevice(d.rdma_device, rec.netns, "");
      if (s.ok()) {
        LogInfo(Component::kCni, "moved RDMA device {} of Pod {} back to the host netns",
                DeviceLabel(d), PodName(rec.pod_namespace, rec.pod_name));
        continue;
      }
      if (InHost(d.rdma_device)) continue;  // already back
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot move RDMA device ", DeviceLabel(d), " of Pod ",
          PodName(rec.pod_namespace, rec.pod_name), " back to the host netns: ", s.message()));
    }
    if (InHost(d.rdma_device)) continue;
    all_back = false;
    std::string w = absl::StrCat(
        "RDMA device ", DeviceLabel(d), " of Pod ", PodName(rec.pod_namespace, rec.pod_name),
        " is not back in the host netns yet and the Pod netns ",
        rec.netns.empty() ? "(unknown)" : rec.netns,
        " is gone; the kernel returns it when the netns is destroyed; CNI GC will confirm");
    LogWarn(Component::kCni, "{}", w);
    warnings->push_back(std::move(w));
  }
  return all_back;
}

absl::Status CniService::EnsureMoved(const AttachmentRecord& rec) {
  auto in_pod = rdma_->ListDevices(rec.netns);
  if (!in_pod.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot list RDMA devices in the Pod netns ",
                                               rec.netns, ": ", in_pod.status().message()));
  }
  for (const auto& d : rec.devices) {
    if (d.action != DeviceAction::kMoved) continue;
    bool there = false;
    for (const auto& l : *in_pod) there = there || l.name == d.rdma_device;
    if (there) continue;
    if (!InHost(d.rdma_device)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RDMA device ", DeviceLabel(d), " of Pod ", PodName(rec.pod_namespace, rec.pod_name),
          " is neither in its netns ", rec.netns, " nor in the host netns"));
    }
    LogWarn(Component::kCni, "retried ADD: RDMA device {} of Pod {} is still in the host netns",
            DeviceLabel(d), PodName(rec.pod_namespace, rec.pod_name));
    absl::Status s = rdma_->MoveDevice(d.rdma_device, "", rec.netns);
    if (!s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot move RDMA device ", DeviceLabel(d), " into the netns ", rec.netns,
                       " of Pod ", PodName(rec.pod_namespace, rec.pod_name), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<agentpb::CniResponse> CniService::AddRecorded(const AttachmentRecord& existing,
                                                             const agentpb::CniRequest& req,
                                                             const absl::Status& netns_ok) {
  if (existing.release_pending) {
    return absl::FailedPreconditionError(
        "a previous ADD or DEL of this attachment left RDMA devices outside the host netns; "
        "the runtime's DEL (or CNI GC) must release them first");
  }
  if (HasMoves(existing.devices)) {
    // A retried ADD: check where the devices are rather than trust the record.
    if (!req.netns().empty() && req.netns() != existing.netns) {
      return absl::FailedPreconditionError(absl::StrCat("ADD retried with netns ", req.netns(),
                                                        " but the attachment moved ",
                                                        "devices into ", existing.netns));
    }
    FABRIC_RETURN_IF_ERROR(netns_ok);
    FABRIC_RETURN_IF_ERROR(EnsureMoved(existing));
  }
  return ToResponse(existing);
}

absl::StatusOr<agentpb::CniResponse> CniService::Add(const agentpb::CniRequest& req) {
  // Checked before the lock: a path that is not a network namespace never
  // reaches code that opens it while every other CNI call waits.
  const absl::Status netns_ok = CheckNetns(req.netns());
  FABRIC_RETURN_IF_ERROR(Validate(req));
  agentpb::CniResponse resp;
  if (req.pod_namespace().empty() || req.pod_name().empty()) {
    resp.add_warnings(
        "no K8S_POD_NAMESPACE/K8S_POD_NAME in CNI_ARGS: not a Kubernetes Pod, nothing to do");
    return resp;
  }
  AttachmentKey key = KeyOf(req);
  {
    std::lock_guard<std::mutex> lock(mu_);
    FABRIC_ASSIGN_OR_RETURN(auto existing, store_.Load(key));
    if (existing) return AddRecorded(*existing, req, netns_ok);
  }
  // The kubelet is asked without the lock (see FetchAllocations).
  FABRIC_ASSIGN_OR_RETURN(auto allocations, FetchAllocations(req.pod_namespace(), req.pod_name()));
  std::lock_guard<std::mutex> lock(mu_);
  // A concurrent ADD of the same attachment may have recorded it meanwhile.
  FABRIC_ASSIGN_OR_RETURN(auto existing, store_.Load(key));
  if (existing) return AddRecorded(*existing, req, netns_ok);
  FABRIC_ASSIGN_OR_RETURN(Plan plan, PlanFrom(allocations));
  if (plan.devices.empty()) {
    LogDebug(Component::kCni, "Pod {} has no fabric devices; nothing to do",
             PodName(req.pod_namespace(), req.pod_name()));
    return resp;
  }
  bool moves = HasMoves(plan.devices);
  if (moves && req.netns().empty()) {
    return absl::InvalidArgumentError("CNI_NETNS is empty; cannot move RDMA devices");
  }
  if (moves) FABRIC_RETURN_IF_ERROR(netns_ok);
  AttachmentRecord rec{key,           req.netns(),    req.pod_namespace(), req.pod_name(),
                       req.pod_uid(), plan.mode_name, plan.devices,        plan.warnings,
                       false};
  // Recorded before moving, so a crash half-way leaves DEL/GC something to undo.
  FABRIC_RETURN_IF_ERROR(store_.Save(rec));

  std::vector<const AttachedDevice*> moved;
  for (const auto& d : rec.devices) {
    if (d.action != DeviceAction::kMoved) continue;
    absl::Status s = rdma_->MoveDevice(d.rdma_device, "", req.netns());
    if (s.ok()) {
      moved.push_back(&d);
      continue;
    }
    bool rolled_back = true;
    for (const AttachedDevice* m : moved) {
      absl::Status r = rdma_->MoveDevice(m->rdma_device, req.netns(), "");
      if (!r.ok()) {
        rolled_back = false;
        LogError(Component::kCni, "rollback: {}", r.ToString());
      }
    }
    if (rolled_back) {
      store_.Remove(key).IgnoreError();
    } else {
      rec.release_pending = true;
      store_.Save(rec).IgnoreError();
    }
    std::string msg =
        absl::StrCat("cannot move RDMA device ", DeviceLabel(d), " into the netns ", req.netns(),
                     " of Pod ", PodName(req.pod_namespace(), req.pod_name()), ": ", s.message());
    LogError(Component::kCni, "{}", msg);
    return absl::FailedPreconditionError(msg);
  }
  for (const auto& d : rec.devices) {
    LogInfo(Component::kCni, "Pod {} container {}: RDMA device {} {} ({})",
            PodName(rec.pod_namespace, rec.pod_name), d.container, DeviceLabel(d),
            DeviceActionName(d.action), d.detail);
  }
  for (const auto& w : rec.warnings)
    LogWarn(Component::kCni, "Pod {}: {}", PodName(rec.pod_namespace, rec.pod_name), w);
  return ToResponse(rec);
}

absl::StatusOr<agentpb::CniResponse> CniService::Del(const agentpb::CniRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  FABRIC_RETURN_IF_ERROR(Validate(req));
  agentpb::CniResponse resp;
  AttachmentKey key = KeyOf(req);
  FABRIC_ASSIGN_OR_RETURN(auto rec, store_.Load(key));
  if (!rec) return resp;  // never added, or already deleted
  std::vector<std::string> warnings;
  FABRIC_ASSIGN_OR_RETURN(bool all_back, Release(*rec, &warnings));
  if (all_back) {
    FABRIC_RETURN_IF_ERROR(store_.Remove(key));
  } else {
    rec->release_pending = true;
    FABRIC_RETURN_IF_ERROR(store_.Save(*rec));
  }
  for (auto& w : warnings) resp.add_warnings(w);
  resp.set_netns_mode(rec->netns_mode);
  return resp;
}

absl::StatusOr<agentpb::CniResponse> CniService::Check(const agentpb::CniRequest& req) {
  const absl::Status netns_ok = CheckNetns(req.netns());
  FABRIC_RETURN_IF_ERROR(Validate(req));
  std::unique_lock<std::mutex> lock(mu_);
  FABRIC_ASSIGN_OR_RETURN(auto rec, store_.Load(KeyOf(req)));
  std::vector<podresources::PodDevices> allocations;
  if (!rec) {
    if (req.pod_namespace().empty() || req.pod_name().empty()) return agentpb::CniResponse();
    lock.unlock();  // the kubelet is asked without the lock (see FetchAllocations)
    FABRIC_ASSIGN_OR_RETURN(allocations, FetchAllocations(req.pod_namespace(), req.pod_name()));
    lock.lock();
    FABRIC_ASSIGN_OR_RETURN(rec, store_.Load(KeyOf(req)));  // an ADD may have finished meanwhile
  }
  if (!rec) {
    FABRIC_ASSIGN_OR_RETURN(Plan plan, PlanFrom(allocations));
    if (HasMoves(plan.devices)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no record of ADD for Pod ", PodName(req.pod_namespace(), req.pod_name()),
          " although it has exclusively allocated RDMA devices that belong in its netns"));
    }
    return agentpb::CniResponse();
  }
  if (HasMoves(rec->devices)) {
    auto mode = rdma_->GetNetnsMode();
    if (!mode.ok()) return absl::UnavailableError(std::string(mode.status().message()));
    if (*mode != NetnsMode::kExclusive) {
      return absl::FailedPreconditionError(
          "the RDMA netns mode changed to shared since ADD; moved devices are not isolated");
    }
    FABRIC_RETURN_IF_ERROR(netns_ok);
    std::string netns = req.netns().empty() ? rec->netns : req.netns();
    auto links = rdma_->ListDevices(netns);
    if (!links.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot list RDMA devices in the Pod netns ", netns, ": ", links.status().message()));
    }
    std::vector<std::string> missing;
    for (const auto& d : rec->devices) {
      if (d.action != DeviceAction::kMoved) continue;
      bool found = false;
      for (const auto& l : *links) found = found || l.name == d.rdma_device;
      if (!found) missing.push_back(DeviceLabel(d));
    }
    if (!missing.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RDMA device(s) ", absl::StrJoin(missing, ", "), " should be in the netns ", netns,
          " of Pod ", PodName(rec->pod_namespace, rec->pod_name), " but are not"));
    }
  }
  return ToResponse(*rec);
}

absl::StatusOr<agentpb::GcResponse> CniService::Gc(const agentpb::GcRequest& req) {
  std::lock_guard<std::mutex> lock(mu_);
  agentpb::GcResponse resp;
  std::set<std::pair<std::string, std::string>> valid;
  for (const auto& a : req.valid_attachments()) valid.emplace(a.container_id(), a.ifname());
  FABRIC_ASSIGN_OR_RETURN(auto records, store_.LoadAll());
  for (auto& rec : records) {
    if (rec.key.network_name != req.network_name()) continue;
    if (valid.count({rec.key.container_id, rec.key.ifname})) continue;
    std::vector<std::string> warnings;
    auto all_back = Release(rec, &warnings);
    for (auto& w : warnings) resp.add_warnings(w);
    if (!all_back.ok()) {
      // GC continues past errors (CNI spec); the record stays for the next GC.
      resp.add_warnings(std::string(all_back.status().message()));
      continue;
    }
    if (*all_back) {
      absl::Status s = store_.Remove(rec.key);
      if (!s.ok()) {
        resp.add_warnings(std::string(s.message()));
        continue;
      }
      resp.set_released(resp.released() + 1);
      LogInfo(Component::kCni, "GC released stale attachment {}/{}/{} of Pod {}",
              rec.key.network_name, rec.key.container_id, rec.key.ifname,
              PodName(rec.pod_namespace, rec.pod_name));
    } else if (!rec.release_pending) {
      rec.release_pending = true;
      store_.Save(rec).IgnoreError();
    }
  }
  return resp;
}

absl::StatusOr<int> CniService::ReconcileGoneNetns() {
  std::lock_guard<std::mutex> lock(mu_);
  FABRIC_ASSIGN_OR_RETURN(auto records, store_.LoadAll());
  int released = 0;
  for (auto& rec : records) {
    if (!rec.netns.empty() && PathExists(rec.netns)) continue;
    std::vector<std::string> warnings;
    auto all_back = Release(rec, &warnings);
    if (!all_back.ok() || !*all_back) continue;  // logged by Release; next round
    if (store_.Remove(rec.key).ok()) {
      ++released;
      LogInfo(Component::kCni, "reconcile: released attachment {}/{}/{} of Pod {} (netns gone)",
              rec.key.network_name, rec.key.container_id, rec.key.ifname,
              PodName(rec.pod_namespace, rec.pod_name));
    }
  }
  return released;
}

agentpb::StatusResponse CniService::Status() {
  agentpb::StatusResponse resp;
  // Ready whenever the agent answers: failing STATUS makes the runtime mark
  // the node's network NotReady, which a missing RDMA module must not do.
  resp.set_ready(true);
  auto mode = rdma_->GetNetnsMode();
  resp.set_message(
      mode.ok()
          ? absl::StrCat("fabric agent ready; RDMA netns mode ", netns::NetnsModeName(*mode))
          : absl::StrCat("fabric agent ready; RDMA netns mode unknown: ", mode.status().message()));
  return resp;
}

absl::StatusOr<std::vector<AttachmentRecord>> CniService::Attachments() const {
  return store_.LoadAll();
}

}  // namespace fabric::cni_service
