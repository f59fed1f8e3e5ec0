#include "agent/daemon/device_plugin_front.h"

#include <utility>

namespace fabric {
namespace {

std::vector<status::Registration> Registrations(const PluginManager& plugins) {
  std::vector<status::Registration> out;
  for (const RegistrationStatus& r : plugins.Status()) {
    out.push_back({r.resource, r.socket, r.mode, r.registered, r.last_error});
  }
  return out;
}

}  // namespace

DevicePluginFront::DevicePluginFront(DevicePluginFrontOptions options, PoolRegistry* registry,
                                     SideFileWriter* side_files,
                                     status::ReadinessReasons* readiness,
                                     std::function<void()> after_holds_round)
    : options_(std::move(options)),
      registry_(registry),
      readiness_(readiness),
      plugins_(std::make_unique<PluginManager>(options_.paths, options_.registration)) {
  // While a pool's CDI spec cannot be written (after the writer's retries),
  // its Allocate says why instead of naming a device the runtime cannot find.
  if (options_.cdi_devices) {
    plugins_->SetAllocateCheck([side_files](const PoolSnapshot& snap) {
      return snap.cdi_kind.empty() ? absl::OkStatus() : side_files->CdiSpecReady(snap.cdi_kind);
    });
  }
  podresources::PodResourcesClientOptions pr;
  pr.socket_path = options_.paths.PodResourcesSocket();
  pr.use_get = false;  // we want every Pod: List
  podresources_ = std::make_unique<podresources::PodResourcesClient>(pr);
  holds::HoldsWatcherOptions ho;
  ho.podresources_socket = options_.paths.PodResourcesSocket();
  ho.checkpoint_path = options_.paths.KubeletCheckpoint();
  ho.interval = options_.podresources_interval;
  ho.restart_settle = options_.kubelet_restart_settle;
  ho.list_failure_bound = options_.list_failure_bound;
  holds_ = std::make_unique<holds::HoldsWatcher>(
      ho, podresources_.get(), [this](const holds::KubeletView& v) { registry_->SetHolds(v); },
      // No PodResources and no checkpoint on this node: grants lapse by TTL.
      [this] { registry_->ExpireGrants(); },
      [this, after = std::move(after_holds_round)] {
        readiness_->Set("podresources", holds_->status().not_ready_reason);
        if (after) after();
      });
}

DevicePluginFront::~DevicePluginFront() { Stop(); }

absl::Status DevicePluginFront::AddPool(std::shared_ptr<PoolState> pool) {
  return plugins_->AddPool(std::move(pool));
}

void DevicePluginFront::RemovePool(const std::string& resource) { plugins_->RemovePool(resource); }

void DevicePluginFront::RefreshHolds() { holds_->RunRound(); }

void DevicePluginFront::OnGrant() { holds_->RequestRefresh(); }

absl::Status DevicePluginFront::Start() {
  if (absl::Status s = plugins_->Start(); !s.ok()) return s;
  holds_->Start();
  return absl::OkStatus();
}

void DevicePluginFront::Stop() {
  holds_->Stop();
  plugins_->Stop();
}

sampler::HoldsState DevicePluginFront::HoldsState() const {
  const holds::HoldsStatus st = holds_->status();
  return sampler::HoldsState{st.complete, st.incomplete_reason};
}

holds::HoldsStatus DevicePluginFront::holds_status() const { return holds_->status(); }

void DevicePluginFront::FillStatus(status::StatusInput* in) const {
  in->registrations = Registrations(*plugins_);
  in->kubelet_restarts = plugins_->kubelet_restarts();
  in->kubelet_view = holds_->status();
  in->podresources_errors = in->kubelet_view.list_errors;
}

std::string DevicePluginFront::NotReadyReason() const {
  return status::NotReadyReason(Registrations(*plugins_));
}

}  // namespace fabric
