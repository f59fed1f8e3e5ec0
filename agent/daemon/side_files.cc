#include "agent/daemon/side_files.h"

#include "absl/strings/str_cat.h"
#include "agent/base/host_paths.h"
#include "agent/base/logging.h"
#include "agent/nfd/nfd_features.h"
#include "plugin/deviceplugin/allocation.h"

namespace fabric {

cdi::CdiSpecInput PoolCdiSpec(const PoolRegistry::PoolView& pool, const NodeView& node,
                              const SideFileOptions& options) {
  const PoolSnapshot& snap = *pool.snapshot;
  cdi::CdiSpecInput in;
  in.kind = cdi::KindForResource(pool.config.name);
  for (const auto& [name, dev] : snap.devices) {
    if (!node.inventory.Find(name)) continue;  // gone: kept by the writer while referenced
    cdi::CdiDevice d;
    d.name = name;
    d.nodes.push_back(
        {HostDevicePath(dev.uverbs.rel_path), "", dev.uverbs.major, dev.uverbs.minor});
    if (dev.kind == DeviceKind::kRdma && snap.rdma_cm) {
      d.nodes.push_back(
          {HostDevicePath(snap.rdma_cm->rel_path), "", snap.rdma_cm->major, snap.rdma_cm->minor});
    }
    d.env.push_back(absl::StrCat(DevicesEnvName(pool.config.name), "_", name, "=", name));
    in.devices.push_back(std::move(d));
  }
  if (!options.memlock_hook_path.empty()) {
    in.memlock_hook = cdi::MemlockHook(options.memlock_hook_path, options.memlock_limit);
  }
  return in;
}

SideFileWriter::SideFileWriter(const PoolRegistry* registry, SideFileOptions options)
    : registry_(registry), options_(std::move(options)) {
  if (options_.write_cdi) {
    cdi_ = std::make_unique<cdi::CdiSpecWriter>(options_.cdi_dir, options_.cdi_state_dir);
  }
}

SideFileWriter::~SideFileWriter() { Stop(); }

void SideFileWriter::WriteNow() {
  std::lock_guard<std::mutex> lock(write_mu_);
  Write(registry_->view());
}

void SideFileWriter::Start() {
  thread_ = std::thread([this] { Run(); });
}

void SideFileWriter::Poke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    dirty_ = true;
  }
  cv_.notify_all();
}

void SideFileWriter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SideFileWriter::Run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || dirty_; });
      if (stop_) return;
      dirty_ = false;
    }
    WriteNow();
  }
}

void SideFileWriter::Write(const PoolRegistry::View& view) {
  if (cdi_) {
    if (!seeded_) {
      for (const std::string& kind : cdi_->WrittenKinds()) kinds_.insert(kind);
      seeded_ = true;
    }
    std::set<std::string> configured;
    for (const PoolRegistry::PoolView& pool : view.pools) {
      cdi::CdiSpecInput in = PoolCdiSpec(pool, view.node, options_);
      configured.insert(in.kind);
      std::set<std::string> referenced;
      for (const PodDeviceHold& h : view.holds) {
        if (h.resource == pool.config.name) referenced.insert(h.device);
      }
      if (in.devices.empty() && referenced.empty()) {
        (void)cdi_->RemoveKind(in.kind);
        continue;
      }
      if (absl::Status s = cdi_->Update(in, referenced); !s.ok()) {
        LogWarn(Component::kCdi, "CDI spec for {} not written: {}", pool.config.name, s.message());
      }
    }
    for (const std::string& kind : kinds_) {
      if (configured.count(kind)) continue;
      LogInfo(Component::kCdi, "removing the CDI spec of {}: its pool is no longer configured",
              kind);
      if (absl::Status s = cdi_->RemoveKind(kind); !s.ok()) {
        LogWarn(Component::kCdi, "CDI spec of {} not removed: {}", kind, s.message());
        configured.insert(kind);  // try again next time
      }
    }
    kinds_ = std::move(configured);
  }
  if (!options_.nfd_features_file.empty()) {
    if (absl::Status s = nfd::WriteFeatures(options_.nfd_features_file, view.node.inventory);
        !s.ok()) {
      LogWarn(Component::kAgent, "NFD feature file not written: {}", s.message());
    }
  }
}

}  // namespace fabric
