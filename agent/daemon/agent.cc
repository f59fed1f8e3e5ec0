#include "agent/daemon/agent.h"

#include <map>
#include <set>

#include "agent/base/file_util.h"
#include "agent/base/json_text.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/cdi/cdi_spec.h"
#include "agent/engine_env/gid_ledger.h"
#include "agent/inventory/cni_attachments.h"
#include "agent/kubeapi/http_kube_client.h"
#include "agent/metrics/metrics.h"
#include "agent/netns/rdma_netlink_mnl.h"
#include "agent/netns/unavailable_rdma_netlink.h"
#include "agent/podprocs/proc_pod_source.h"
#include "agent/podsapi/pods_route.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "nlohmann/json.hpp"

namespace fabric {
namespace {

PoolRegistryOptions RegistryOptions(const AgentOptions& o) {
  PoolRegistryOptions r;
  r.grant_ttl = o.grant_ttl;
  if (o.cdi_devices)
    r.cdi_kind = [](const std::string& resource) { return cdi::KindForResource(resource); };
  return r;
}

SideFileOptions SideOptions(const AgentOptions& o) {
  SideFileOptions s;
  s.write_cdi = o.write_cdi;
  s.cdi_dir = o.paths.cdi_dir;
  s.cdi_state_dir = o.paths.state_dir + "/cdi";
  s.memlock_hook_path = o.memlock_hook_path;
  s.memlock_limit = o.memlock_limit;
  s.nfd_features_file = o.nfd_features_file;
  return s;
}

// "<containerd|cri-o>=<dir>" entries; empty: the runtimes' default places.
absl::StatusOr<std::vector<podprocs::RuntimeStateDir>> RuntimeStateDirs(
    const std::vector<std::string>& flags) {
  if (flags.empty()) return podprocs::DefaultRuntimeStateDirs();
  std::vector<podprocs::RuntimeStateDir> out;
  for (const std::string& f : flags) {
    const size_t eq = f.find('=');
    const std::string kind = f.substr(0, eq == std::string::npos ? 0 : eq);
    podprocs::RuntimeStateDir d;
    if (kind == "containerd") {
      d.kind = podprocs::RuntimeKind::kContainerd;
    } else if (kind == "cri-o") {
      d.kind = podprocs::RuntimeKind::kCrio;
    } else {
      return absl::InvalidArgumentError("--runtime-state-dir: '" + f +
                                        "' is not containerd=DIR or cri-o=DIR");
    }
    d.dir = f.substr(eq + 1);
    if (d.dir.empty() || d.dir[0] != '/') {
      return absl::InvalidArgumentError("--runtime-state-dir: '" + f +
                                        "': the directory must be an absolute path");
    }
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

Agent::Agent(AgentOptions options)
    : options_(std::move(options)),
      registry_(std::make_unique<PoolRegistry>(RegistryOptions(options_))),
      side_files_(std::make_unique<SideFileWriter>(registry_.get(), SideOptions(options_))) {
  if (options_.make_front) {
    front_ = options_.make_front(
        FrontContext{&options_, registry_.get(), side_files_.get(), &readiness_});
  } else {
    DevicePluginFrontOptions fo;
    fo.paths = options_.paths;
    fo.registration = options_.registration;
    fo.podresources_interval = options_.podresources_interval;
    fo.kubelet_restart_settle = options_.kubelet_restart_settle;
    fo.list_failure_bound = options_.list_failure_bound;
    fo.cdi_devices = options_.cdi_devices;
    auto front = std::make_unique<DevicePluginFront>(fo, registry_.get(), side_files_.get(),
                                                     &readiness_, [this] { ReconcileCniIfDue(); });
    device_plugins_ = front.get();
    front_ = std::move(front);
  }
}

Agent::~Agent() { Stop(); }

absl::Status Agent::Start() {
  Config config = DefaultConfig();
  if (!options_.config_path.empty()) {
    auto loaded = LoadConfigFile(options_.config_path);
    if (!loaded.ok()) return loaded.status();
    config = *loaded;
  }
  // With the CNI part on, the inventory keeps listing the devices moved into
  // Pod netns (from the CNI records), described as last seen.
  InventoryOptions inventory_options;
  if (!options_.agent_socket.empty()) {
    attachments_ = std::make_unique<CniAttachmentRecords>(options_.paths.state_dir + "/cni");
    inventory_options.state_file = options_.paths.state_dir + "/inventory/devices.json";
  }
  inventory_ = std::make_unique<Inventory>(options_.paths, inventory_options, attachments_.get());
  auto inventory = inventory_->Discover();
  if (!inventory.ok()) return inventory.status();
  LogInfo(Component::kDiscovery, "found {} RDMA device(s){}", inventory->devices.size(),
          inventory->rdma_cm ? "" : " (no rdma_cm)");
  if (absl::Status s = StartSampler(); !s.ok()) return s;
  if (absl::Status s = StartPodConditions(); !s.ok()) return s;
  monitor_ = std::make_unique<HealthMonitor>(
      options_.paths, config.health, [this] { return sampler_->Latest(); },
      [this](const NodeInventory& inv, const std::map<std::string, DeviceHealth>& health) {
        OnNodeChanged(inv, health);
      });
  // The first advertisement already reflects a port that is down.
  registry_->SetNode(*inventory, monitor_->Prime(*inventory, MonotonicNow()));
  if (absl::Status s = ApplyConfig(config); !s.ok()) return s;
  // Holds known before the first advertisement: after an agent restart a
  // running shared Pod's device is withdrawn from exclusive pools at once.
  front_->RefreshHolds();
  // The first sample, with the node and its holds, before anything serves:
  // /metrics has counters from its first scrape, health its first baseline.
  sampler_->TakeNow();
  // The files are in place before the first registration; later changes are
  // written by the writer's thread, outside every lock Allocate takes.
  side_files_->WriteNow();
  registry_->SetOnChange([this] { side_files_->Poke(); });
  registry_->SetOnGrant([this] { front_->OnGrant(); });
  side_files_->Start();
  monitor_->Start();
  inventory_->Start(
      absl::Milliseconds(config.health.poll_interval_ms),
      [this](const NodeInventory& inv) { monitor_->SetInventory(inv, MonotonicNow()); });
  if (!options_.agent_socket.empty()) {
    rdma_netlink_ = netns::OpenRdmaNetlink();
    // The CNI side asks for one Pod: Get (the client falls back to a filtered
    // List where the kubelet disables Get), on its own client and rate budget.
    podresources::PodResourcesClientOptions cni_pr;
    cni_pr.socket_path = options_.paths.PodResourcesSocket();
    cni_pr.use_get = true;
    cni_podresources_ = std::make_unique<podresources::PodResourcesClient>(cni_pr);
    cni_ = std::make_unique<cni_service::CniService>(options_.paths, cni_podresources_.get(),
                                                     &resolver_, rdma_netlink_.get());
    if (auto released = cni_->ReconcileGoneNetns(); released.ok() && *released > 0) {
      LogInfo(Component::kCni, "released {} attachment(s) whose Pod netns is gone", *released);
    }
    cni_server_ = std::make_unique<cni_service::CniAgentServer>(cni_.get());
    if (absl::Status s = cni_server_->Start(options_.agent_socket); !s.ok()) return s;
  }
  if (options_.doctor.enabled) {
    // Opt-in and never on the device-plugin path: if it cannot start, the
    // agent serves on and /v1/peers says why.
    doctor_ = std::make_unique<doctor::Doctor>(options_.doctor,
                                               doctor::DeviceSpecs(*inventory, options_.doctor));
    if (absl::Status s = doctor_->Start(); !s.ok()) {
      LogError(Component::kAgent, "doctor: not running: {}", s.message());
      doctor_->Stop();
      doctor_.reset();
      doctor_error_ = std::string(s.message());
    }
  }
  // Started after cni_: the device-plugin front's holds loop reconciles
  // through it.
  if (absl::Status s = front_->Start(); !s.ok()) return s;
  sampler_->Start();
  if (!options_.metrics_address.empty()) {
    HttpHandlers h;
    h.metrics = [this] { return MetricsText(); };
    h.not_ready_reason = [this] { return NotReadyReason(); };
    h.node_json = [this] { return NodeJson(); };
    if (options_.doctor.enabled) h.peers_json = [this] { return PeersJson(); };
    h.pods = [this](const std::string& path, const std::string& query) {
      return observer_->ServeHttp(path, query);
    };
    http_ = std::make_unique<HttpServer>(h, options_.metrics_cache);
    if (absl::Status s = http_->Start(options_.metrics_address); !s.ok()) return s;
  }
  return StartPodsTls();
}

absl::Status Agent::StartPodsTls() {
  if (options_.pods_tls_address.empty()) return absl::OkStatus();
  if (!options_.observe) {
    return absl::InvalidArgumentError("--pods-tls-address needs --observe: it serves /v1/pods");
  }
  if (options_.pods_tls_cert_file.empty() || options_.pods_tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--pods-tls-address needs --pods-tls-cert-file and --pods-tls-key-file");
  }
  // A review that takes longer is answered 503: the client waits no longer,
  // and Stop() never waits longer for a review in progress.
  kubeapi::KubeConfig reviews = options_.kube;
  reviews.request_timeout = std::min(reviews.request_timeout, absl::Seconds(5));
  auto client = kubeapi::HttpKubeClient::Create(reviews);
  if (!client.ok()) {
    return absl::Status(client.status().code(),
                        absl::StrCat("--pods-tls-address: ", client.status().message()));
  }
  pods_client_ = *std::move(client);
  podsapi::AuthorizerOptions ao;
  ao.audience = options_.pods_token_audience;
  ao.accept_apiserver_tokens = options_.pods_accept_apiserver_tokens;
  pods_authorizer_ = std::make_unique<podsapi::PodsAuthorizer>(pods_client_.get(), ao);
  podsapi::TlsServerOptions to;
  to.address = options_.pods_tls_address;
  to.cert_file = options_.pods_tls_cert_file;
  to.key_file = options_.pods_tls_key_file;
  pods_tls_ = std::make_unique<podsapi::TlsServer>(to, [this](const podsapi::TlsRequest& r) {
    return podsapi::ServeAuthorized(r, *pods_authorizer_,
                                    [this](const std::string& path, const std::string& query) {
                                      return observer_->ServeHttp(path, query);
                                    });
  });
  return pods_tls_->Start();
}

void Agent::Stop() {
  // First: its rounds read the registry and the holds watcher.
  if (sampler_) sampler_->Stop();
  if (conditions_) conditions_->Stop();
  if (pods_tls_) pods_tls_->Stop();
  if (cni_server_) cni_server_->Stop();
  if (http_) http_->Stop();
  if (inventory_) inventory_->Stop();
  if (doctor_) doctor_->Stop();
  if (monitor_) monitor_->Stop();
  front_->Stop();
  side_files_->Stop();
}

absl::Status Agent::Reload() {
  if (options_.config_path.empty()) return absl::OkStatus();
  auto loaded = LoadConfigFile(options_.config_path);
  if (!loaded.ok()) {
    LogError(Component::kConfig, "config reload rejected, keeping the previous config: {}",
             loaded.status().message());
    return loaded.status();
  }
  LogInfo(Component::kConfig, "config reloaded from {}", options_.config_path);
  if (monitor_) monitor_->SetConfig(loaded->health);
  return ApplyConfig(*loaded);
}

absl::Status Agent::ApplyConfig(const Config& config) {
  PoolRegistry::Changes changes = registry_->ApplyConfig(config);
  for (const std::string& name : changes.removed) front_->RemovePool(name);
  for (auto& state : changes.added) {
    LogInfo(Component::kPlugin, "{}: {} unit(s), {} healthy", state->resource(),
            state->snapshot()->units.size(), state->snapshot()->HealthyCount());
    if (absl::Status s = front_->AddPool(state); !s.ok()) return s;
  }
  return absl::OkStatus();
}

void Agent::OnNodeChanged(const NodeInventory& inventory,
                          const std::map<std::string, DeviceHealth>& health) {
  registry_->SetNode(inventory, health);
}

absl::Status Agent::StartSampler() {
  restrack::ResourceSource* resources = nullptr;
  podprocs::ProcSource* procs = nullptr;
  if (options_.observe) {
    auto dirs = RuntimeStateDirs(options_.runtime_state_dirs);
    if (!dirs.ok()) return dirs.status();
    resources = options_.resource_source;
    if (resources == nullptr) {
      owned_resources_ = restrack::OpenNetlinkResourceSource();
      resources = owned_resources_.get();
    }
    procs = options_.proc_source;
    if (procs == nullptr) {
      owned_procs_ = std::make_unique<podprocs::ProcPodSource>(
          podprocs::ProcPodSource::Options{options_.paths.proc_root, *std::move(dirs)});
      procs = owned_procs_.get();
    }
    LogInfo(Component::kAgent, "observation on: RDMA resources from netlink, Pods from {}",
            options_.paths.proc_root);
  }
  sampler::SamplerOptions so;
  so.paths = options_.paths;
  so.period = options_.sample_period;
  // Windows (up to 10 min) are only evaluated with observation on; without it
  // the verdicts are unknown and /metrics needs the newest sample alone, so
  // the ring stays a few samples long (the device-plugin footprint).
  if (!options_.observe) so.max_window = options_.sample_period;
  sampler::SamplerInputs in;
  // The live devices as the registry knows them (set before the first round).
  in.devices = [this] { return registry_->node().inventory.devices; };
  in.grants = [this] { return Grants(); };
  in.holds = [this] { return front_->HoldsState(); };
  sampler_ = std::make_unique<sampler::Sampler>(so, std::move(in), resources, procs);
  // Without --observe the verdicts say "unknown: observation is off" rather
  // than nothing, so a Pod's check is never silently empty.
  observe::ObserverOptions oo;
  oo.transport.floor_bytes = options_.observe_floor_bytes;
  oo.sample_period = so.period;
  observer_ = std::make_unique<observe::TransportObserver>(
      oo, [this](absl::FunctionRef<void(const sampler::SampleRing&)> read) {
        sampler_->ReadRing(read);
      });
  sampler_->OnSample([this](const sampler::SampleRing& ring) {
    observer_->OnSample(ring);
    if (conditions_ == nullptr) return;
    if (std::shared_ptr<const observe::WindowResult> r = observer_->CurrentResult()) {
      conditions_->Poke(std::move(r));
    }
  });
  return absl::OkStatus();
}

absl::Status Agent::StartPodConditions() {
  if (!options_.pod_conditions) return absl::OkStatus();
  if (!options_.observe) {
    return absl::InvalidArgumentError(
        "--pod-conditions needs --observe: the conditions come from the transport verdicts");
  }
  if (options_.node_name.empty()) {
    return absl::InvalidArgumentError("--pod-conditions needs --node-name (or $NODE_NAME)");
  }
  auto client = kubeapi::HttpKubeClient::Create(options_.kube);
  if (!client.ok()) {
    return absl::Status(client.status().code(),
                        absl::StrCat("--pod-conditions: ", client.status().message()));
  }
  podconditions::ControllerOptions co;
  co.node = options_.node_name;
  co.writer = options_.conditions;
  conditions_ = std::make_unique<podconditions::PodConditionsController>(*std::move(client), co);
  conditions_->Start();
  LogInfo(Component::kPods,
          "Pod conditions on: fabric.gpustack.ai/FabricAttached and Transport of node {}'s Pods "
          "through {} (attach grace {})",
          options_.node_name, options_.kube.server,
          absl::FormatDuration(options_.conditions.attach_grace));
  return absl::OkStatus();
}

std::vector<sampler::Grant> Agent::Grants() const {
  PoolRegistry::View view = registry_->view();
  // What each pool's grants' GID index variables named (issue 32, item 12).
  std::map<std::string, std::vector<engine_env::GivenGid>> given;
  for (const PoolRegistry::PoolView& pv : view.pools) {
    if (pv.config.env.empty()) continue;
    std::set<std::string> held;
    for (const PodDeviceHold& h : view.holds) {
      if (h.resource == pv.config.name) held.insert(h.device);
    }
    given[pv.config.name] = pv.state->gid_ledger().Current(held);
  }
  std::vector<sampler::Grant> out;
  for (PodDeviceHold& hold : view.holds) {
    const PoolConfig* pool = view.config.FindPool(hold.resource);
    sampler::Grant g;
    g.exclusive = pool != nullptr && pool->mode == PoolMode::kExclusive;
    auto it = given.find(hold.resource);
    const RdmaDevice* live = view.node.inventory.Find(hold.device);
    if (it != given.end() && !it->second.empty() && live != nullptr) {
      g.gid_gone = engine_env::HolderGidGone(it->second, *live);
    }
    g.hold = std::move(hold);
    out.push_back(std::move(g));
  }
  return out;
}

void Agent::ReconcileCniIfDue() {
  if (!cni_ || MonotonicNow() - last_cni_reconcile_ < absl::Seconds(60)) return;
  last_cni_reconcile_ = MonotonicNow();
  (void)cni_->ReconcileGoneNetns();
}

status::StatusInput Agent::StatusNow() const {
  status::StatusInput in;
  in.version = "0.1.0";
  front_->FillStatus(&in);
  in.pools = registry_->view();
  return in;
}

std::string Agent::MetricsText() const {
  MetricsInput in = status::BuildMetricsInput(StatusNow());
  if (sampler_) {
    // The counters come from the latest sample: a scrape reads no file.
    in.sample = sampler_->Latest();
    const sampler::SamplerStatus st = sampler_->status();
    SamplerMetrics sm;
    sm.rounds = st.rounds;
    sm.last_round_seconds = absl::ToDoubleSeconds(st.last_round);
    if (in.sample)
      sm.last_sample_age_seconds = absl::ToDoubleSeconds(MonotonicNow() - in.sample->mono);
    sm.unreadable_devices = st.unreadable_devices;
    sm.ring_bytes = st.ring_bytes;
    in.sampler = sm;
  }
  std::string out = RenderMetrics(in);
  if (observer_) out += observer_->MetricsText();
  if (conditions_) out += conditions_->MetricsText();
  if (doctor_) out += doctor_->MetricsText();
  out += side_files_->MetricsText();
  out += front_->MetricsText();
  return out;
}

std::string Agent::PeersJson() const {
  if (doctor_) return doctor_->PeersJson();
  nlohmann::json out{{"verdict", "error"},
                     {"error", "doctor not running: " + doctor_error_},
                     {"pairs", nlohmann::json::array()}};
  return DumpJson(out, 2) + "\n";
}

std::string Agent::NotReadyReason() const {
  std::string why = front_->NotReadyReason();
  const std::string more = readiness_.Join();
  if (!more.empty()) why += (why.empty() ? "" : "; ") + more;
  // A CDI spec or NFD file that failed every retry (one short lock, no I/O).
  const std::string files = side_files_->NotReadyReason();
  if (!files.empty()) why += (why.empty() ? "" : "; ") + files;
  return why;
}

std::string Agent::NodeJson() const { return status::NodeJson(StatusNow()); }

}  // namespace fabric
