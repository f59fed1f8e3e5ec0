#include "agent/dra_front/dra_front.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/base/prometheus_text.h"

namespace fabric::dra {

class DraFront::PoolWatch : public PoolSubscriber {
 public:
  PoolWatch(std::shared_ptr<PoolState> pool, SlicePublisher* publisher)
      : pool_(std::move(pool)), publisher_(publisher) {
    pool_->Subscribe(this);
  }
  ~PoolWatch() override { pool_->Unsubscribe(this); }
  // Under the pool's lock: only a poke.
  void Push(std::shared_ptr<const PoolSnapshot>) override { publisher_->Poke(); }
  void Close() override {}

 private:
  std::shared_ptr<PoolState> pool_;
  SlicePublisher* const publisher_;
};

DraFront::DraFront(DraFrontOptions options, std::unique_ptr<kubeapi::KubeClient> client,
                   PoolRegistry* registry, SideFileWriter* side_files,
                   status::ReadinessReasons* readiness)
    : options_(std::move(options)),
      client_(std::move(client)),
      registry_(registry),
      readiness_(readiness) {
  SlicePublisherOptions po;
  po.node_name = options_.node_name;
  po.slices = options_.slices;
  po.resync = options_.slice_resync;
  po.before_sync = [this] { OnPoolsChanged(); };
  po.ready = [this] { return claims_->status().listed; };
  publisher_ =
      std::make_unique<SlicePublisher>(po, client_.get(), [this] { return PublishedSnapshots(); });
  claims_ = std::make_unique<ClaimHolds>(
      ClaimHoldsOptions{kDriverName, options_.node_name}, client_.get(), [this] { return Names(); },
      [this](const holds::KubeletView& view) { OnClaimsView(view); });
  if (!options_.podresources_socket.empty() || !options_.kubelet_checkpoint.empty()) {
    podresources::PodResourcesClientOptions pr;
    pr.socket_path = options_.podresources_socket;
    pr.use_get = false;
    podresources_ = std::make_unique<podresources::PodResourcesClient>(pr);
    holds::HoldsWatcherOptions ho;
    ho.podresources_socket = options_.podresources_socket;
    ho.checkpoint_path = options_.kubelet_checkpoint;
    ho.interval = options_.device_plugin_holds_interval;
    device_plugin_holds_ = std::make_unique<holds::HoldsWatcher>(
        ho, podresources_.get(), [this](const holds::KubeletView& v) { OnDevicePluginView(v); },
        // Neither source on this node: no device-plugin grant can exist.
        [this] { OnDevicePluginView(holds::KubeletView{}); });
  }
  kubeapi::WatchOptions wo;
  wo.collection_path = kResourceClaimsPath;
  claim_watch_ = std::make_unique<kubeapi::Watch>(client_.get(), wo, claims_.get());
  if (!options_.cdi_dir.empty()) {
    env_specs_ = std::make_unique<ClaimEnvSpecs>(
        options_.cdi_dir, options_.state_dir + "/dra/claim-cdi", kDriverName);
  }
  preparer_ = std::make_unique<DraDevicePreparer>(
      registry_, [this] { return Names(); },
      [side_files](const std::string& kind) { return side_files->CdiSpecReady(kind); },
      env_specs_.get());
  DraPluginOptions dp;
  dp.node_name = options_.node_name;
  dp.state_dir = options_.state_dir + "/dra";
  plugin_ = std::make_unique<DraPluginService>(dp, claims_.get(), preparer_.get());
  health_ = std::make_unique<DraHealthService>(options_.node_name);
  DraServerOptions so;
  so.kubelet_root = options_.kubelet_root;
  so.plugins_registry_dir = options_.plugins_registry_dir;
  server_ = std::make_unique<DraServer>(so, plugin_.get(), health_.get());
}

DraFront::~DraFront() { Stop(); }

std::vector<std::shared_ptr<const PoolSnapshot>> DraFront::Snapshots() const {
  std::vector<std::shared_ptr<const PoolSnapshot>> out;
  for (const std::shared_ptr<PoolState>& p : registry_->pools()) out.push_back(p->snapshot());
  return out;
}

DraNames DraFront::Names() const { return DraNames::ForPools(Snapshots()); }

absl::Status DraFront::AddPool(std::shared_ptr<PoolState> pool) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    watches_[pool->resource()] = std::make_unique<PoolWatch>(pool, publisher_.get());
  }
  publisher_->Poke();
  return absl::OkStatus();
}

void DraFront::RemovePool(const std::string& resource) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    watches_.erase(resource);
  }
  publisher_->Poke();
}

void DraFront::RefreshHolds() {
  if (device_plugin_holds_) device_plugin_holds_->RunRound();
  claims_->Republish();
}

void DraFront::OnClaimsView(const holds::KubeletView& view) {
  std::lock_guard<std::mutex> lock(views_mu_);
  claims_view_ = view;
  ApplyHoldsLocked();
}

void DraFront::OnDevicePluginView(const holds::KubeletView& view) {
  std::set<std::pair<std::string, std::string>> units;
  for (const podresources::PodDevices& e : view.entries) {
    for (const std::string& id : e.device_ids) units.insert({e.resource, id});
  }
  bool changed;
  {
    std::lock_guard<std::mutex> lock(views_mu_);
    // An incomplete view keeps what was known (a kubelet restart settling).
    if (!view.complete) units.insert(device_plugin_units_.begin(), device_plugin_units_.end());
    changed = units != device_plugin_units_;
    if (changed && !units.empty()) {
      LogInfo(Component::kDra,
              "{} unit(s) held through device-plugin grants made before DRA mode: not published "
              "until their Pods end",
              units.size());
    }
    device_plugin_units_ = std::move(units);
    device_plugin_view_ = view;
    ApplyHoldsLocked();
  }
  if (changed) publisher_->Poke();
}

void DraFront::ApplyHoldsLocked() {
  if (!claims_view_) return;  // the first claims view applies both
  if (!device_plugin_holds_) {
    registry_->SetHolds(*claims_view_);
    return;
  }
  holds::KubeletView device_plugin;
  if (device_plugin_view_) {
    device_plugin = *device_plugin_view_;
  } else {
    device_plugin.complete = false;
    device_plugin.incomplete_reason = "not read yet";
  }
  registry_->SetHolds(holds::WithDevicePluginHolds(*claims_view_, device_plugin));
}

std::vector<std::shared_ptr<const PoolSnapshot>> DraFront::PublishedSnapshots() const {
  std::vector<std::shared_ptr<const PoolSnapshot>> pools = Snapshots();
  std::lock_guard<std::mutex> lock(views_mu_);
  if (device_plugin_units_.empty()) return pools;
  // The devices those grants hold, then every unit of theirs in any pool.
  std::map<std::string, std::string> held;  // device -> "<resource> grant"
  for (const auto& snap : pools) {
    for (const auto& [resource, id] : device_plugin_units_) {
      if (snap->resource != resource) continue;
      if (const PoolUnit* u = snap->FindUnit(id)) held.emplace(u->device, resource);
    }
  }
  for (auto& snap : pools) {
    bool touched = false;
    auto copy = std::make_shared<PoolSnapshot>(*snap);
    for (PoolUnit& u : copy->units) {
      auto h = held.find(u.device);
      if (h == held.end() || !u.withdrawn.empty()) continue;
      u.withdrawn = absl::StrCat("withdrawn while device ", u.device,
                                 " is held through a device-plugin grant of ", h->second);
      touched = true;
    }
    if (touched) snap = std::move(copy);
  }
  return pools;
}

// A prepare's grant already withdrew the device; the claim watch confirms it.
void DraFront::OnGrant() { publisher_->Poke(); }

void DraFront::OnPoolsChanged() {
  PublishHealth();
  // Unit names may have moved with the pools: re-resolve the claims' devices.
  claims_->Republish();
}

void DraFront::PublishHealth() {
  std::vector<DeviceHealthEntry> entries;
  const std::vector<std::shared_ptr<const PoolSnapshot>> pools = Snapshots();
  const DraNames names = DraNames::ForPools(pools);
  for (const auto& snap : pools) {
    for (const PoolUnit& u : snap->units) {
      const std::string* name = names.NameOf(snap->resource, u.id);
      if (name == nullptr) continue;
      DeviceHealthEntry e;
      e.device = *name;
      e.healthy = u.healthy;
      if (!u.healthy) {
        auto h = snap->health.find(u.device);
        e.message =
            h != snap->health.end() && !h->second.reason.empty() ? h->second.reason : "unhealthy";
      }
      entries.push_back(std::move(e));
    }
  }
  health_->Publish(std::move(entries));
}

absl::Status DraFront::Start() {
  // Claims prepared before a reboot keep their engine environment: the
  // kubelet answers them from our checkpoint, without a new Prepare.
  if (env_specs_) {
    absl::StatusOr<int> restored = env_specs_->Restore();
    if (!restored.ok()) {
      LogError(Component::kDra, "claims' engine-environment CDI entries not restored: {}",
               restored.status().message());
    } else if (*restored > 0) {
      LogInfo(Component::kDra, "restored {} claim engine-environment CDI entr{}", *restored,
              *restored == 1 ? "y" : "ies");
    }
  }
  // The first sync runs on the publisher's thread at once: an API server
  // that does not answer must not hold up /healthz (the liveness probe).
  // Until it succeeds, /readyz says why.
  publisher_->Start();
  publisher_->Poke();
  if (device_plugin_holds_) device_plugin_holds_->Start();
  claim_thread_ = std::thread([this] { (void)claim_watch_->Run(); });
  if (absl::Status s = server_->Start(); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
  return absl::OkStatus();
}

void DraFront::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    watches_.clear();
  }
  server_->Stop();
  if (device_plugin_holds_) device_plugin_holds_->Stop();
  claim_watch_->Stop();
  if (claim_thread_.joinable()) claim_thread_.join();
  publisher_->Stop();
}

sampler::HoldsState DraFront::HoldsState() const {
  const ClaimHoldsStatus st = claims_->status();
  return sampler::HoldsState{st.listed, st.listed ? "" : "ResourceClaims not listed yet"};
}

holds::HoldsStatus DraFront::holds_status() const {
  const ClaimHoldsStatus st = claims_->status();
  holds::HoldsStatus h;
  h.complete = st.listed;
  h.incomplete_reason = st.listed ? "" : "ResourceClaims not listed yet";
  h.last_list_error = st.last_error;
  return h;
}

void DraFront::FillStatus(status::StatusInput* in) const {
  const DraRegistrationState reg = server_->registration();
  // Every pool is served by the one DRA driver: its registration is theirs.
  for (const std::shared_ptr<PoolState>& p : registry_->pools()) {
    in->registrations.push_back(
        {p->resource(), server_->plugin_socket(), "dra", reg.registered, reg.last_error});
  }
  in->kubelet_restarts = reg.socket_restarts;
  in->kubelet_view = holds_status();
  const SlicePublisherStatus pub = publisher_->status();
  const DraPluginStats ps = plugin_->Stats();
  const ClaimHoldsStatus cs = claims_->status();
  status::DraStatus d;
  d.driver = kDriverName;
  d.pool = options_.node_name;
  d.registered = reg.registered;
  d.slices_synced = pub.synced;
  d.slices = pub.slices;
  d.devices = pub.devices;
  d.generation = pub.generation;
  d.slice_sync_failures = pub.failures;
  d.slice_error = pub.last_error;
  d.claims_listed = cs.listed;
  d.claims = cs.claims;
  d.claims_rejected = cs.rejected;
  d.prepared_claims = ps.prepared_claims;
  d.prepare_calls = ps.prepare_calls;
  d.prepare_errors = ps.prepare_errors;
  d.unprepare_calls = ps.unprepare_calls;
  d.unprepare_errors = ps.unprepare_errors;
  d.prepare_latency = ps.prepare_latency;
  d.checkpoint_error = ps.checkpoint_load_error;
  in->dra = d;
}

std::string DraFront::NotReadyReason() const {
  std::vector<std::string> why;
  const DraRegistrationState reg = server_->registration();
  if (!reg.registered) {
    why.push_back(absl::StrCat("DRA driver ", kDriverName, " not registered with the kubelet",
                               reg.last_error.empty() ? "" : ": " + reg.last_error));
  }
  const SlicePublisherStatus pub = publisher_->status();
  if (!pub.synced) {
    why.push_back(absl::StrCat("ResourceSlices not published",
                               pub.last_error.empty() ? "" : ": " + pub.last_error));
  }
  std::string out;
  for (const std::string& w : why) out += (out.empty() ? "" : "; ") + w;
  return out;
}

std::string DraFront::MetricsText() const {
  status::StatusInput in;
  FillStatus(&in);
  return status::DraMetricsText(in);
}

}  // namespace fabric::dra
