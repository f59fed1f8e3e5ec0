#include "agent/daemon/side_files.h"

#include <algorithm>

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
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    const auto wake = [this] { return stop_ || dirty_; };
    if (retry_at_) {
      cv_.wait_until(lock, *retry_at_, wake);  // steady clock: a clock step neither
    } else {                                   // delays nor hurries a retry
      cv_.wait(lock, wake);
    }
    if (stop_) return;
    dirty_ = false;  // a retry writes the whole current view, as a change does
    lock.unlock();
    WriteNow();
    lock.lock();
  }
}

std::chrono::milliseconds SideFileWriter::Backoff(int consecutive_failures) const {
  std::chrono::milliseconds b = options_.retry_initial;
  for (int i = 1; i < consecutive_failures && b < options_.retry_max; ++i) b *= 2;
  return std::min(b, options_.retry_max);
}

int SideFileWriter::Record(Outcome* o, const std::string& error) {
  ++o->attempts;
  if (error.empty()) {
    o->consecutive = 0;
    o->last_error.clear();
  } else {
    ++o->consecutive;
    ++o->errors;
    o->last_error = error;
  }
  return o->consecutive;
}

namespace {

// One line per failed attempt while retrying (at most one per retry_max once
// backed off), an error when the file starts counting as failing, and a line
// when it is written again.
void LogAttempt(Component c, const std::string& what, int before, int after,
                int attempts_before_failing, const std::string& error,
                std::chrono::milliseconds retry_in) {
  if (after == 0) {
    if (before > 0) LogInfo(c, "{} written after {} failed attempt(s)", what, before);
    return;
  }
  if (after == attempts_before_failing) {
    LogError(c, "{} still not written after {} attempts: {}; retrying every {} ms", what, after,
             error, retry_in.count());
  } else {
    LogWarn(c, "{} not written (attempt {}): {}; retrying in {} ms", what, after, error,
            retry_in.count());
  }
}

}  // namespace

std::vector<SideFileHealth> SideFileWriter::Health() const {
  std::lock_guard<std::mutex> lock(health_mu_);
  std::vector<SideFileHealth> out;
  auto add = [&](const char* file, const Outcome& o) {
    out.push_back({file, o.errors, o.consecutive, o.consecutive >= options_.attempts_before_failing,
                   o.last_error});
  };
  if (cdi_) add("cdi", cdi_health_);
  if (!options_.nfd_features_file.empty()) add("nfd", nfd_health_);
  return out;
}

absl::Status SideFileWriter::CdiSpecReady(const std::string& kind) const {
  std::lock_guard<std::mutex> lock(health_mu_);
  auto it = cdi_kind_failures_.find(kind);
  if (it == cdi_kind_failures_.end() || it->second.first < options_.attempts_before_failing) {
    return absl::OkStatus();
  }
  return absl::UnavailableError(absl::StrCat(
      "the CDI spec of ", kind, " could not be written (", it->second.first,
      " attempts in a row): ", it->second.second,
      "; the container runtime could not resolve the CDI device names this Allocate returns. "
      "Make ",
      options_.cdi_dir,
      " writable by the agent (a hostPath of the runtime's CDI directory, e.g. /var/run/cdi), "
      "or run the agent without --cdi-devices; the agent keeps retrying and Allocate succeeds "
      "once the spec is written"));
}

std::string SideFileWriter::NotReadyReason() const {
  std::string why;
  for (const SideFileHealth& h : Health()) {
    if (!h.failing) continue;
    absl::StrAppend(&why, why.empty() ? "" : "; ",
                    h.file == "cdi" ? "CDI specs" : "NFD feature file", " not written (",
                    h.consecutive_failures, " attempts in a row): ", h.last_error);
  }
  return why;
}

std::string SideFileWriter::MetricsText() const {
  const std::vector<SideFileHealth> health = Health();
  if (health.empty()) return "";
  std::string out =
      "# HELP fabric_side_file_write_errors_total Failed writes of the files the agent keeps for "
      "other node components (cdi: the CDI specs, nfd: the NFD feature file); each is retried.\n"
      "# TYPE fabric_side_file_write_errors_total counter\n";
  for (const SideFileHealth& h : health) {
    absl::StrAppend(&out, "fabric_side_file_write_errors_total{file=\"", h.file, "\"} ",
                    h.write_errors, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP fabric_side_file_failing 1 while the file has failed every write for "
                  "the last ",
                  options_.attempts_before_failing, " attempts.\n",
                  "# TYPE fabric_side_file_failing gauge\n");
  for (const SideFileHealth& h : health) {
    absl::StrAppend(&out, "fabric_side_file_failing{file=\"", h.file, "\"} ", h.failing ? 1 : 0,
                    "\n");
  }
  return out;
}

void SideFileWriter::Write(const PoolRegistry::View& view) {
  int worst = 0;  // the most consecutive failures of any file, after this attempt
  if (cdi_) {
    std::string cdi_error;                          // the first of this attempt
    std::map<std::string, std::string> kind_error;  // by kind, this attempt
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
        std::string e = absl::StrCat(cdi_->SpecPath(in.kind), ": ", s.message());
        if (cdi_error.empty()) cdi_error = e;
        kind_error[in.kind] = std::move(e);
      }
    }
    for (const std::string& kind : kinds_) {
      if (configured.count(kind)) continue;
      LogInfo(Component::kCdi, "removing the CDI spec of {}: its pool is no longer configured",
              kind);
      if (absl::Status s = cdi_->RemoveKind(kind); !s.ok()) {
        if (cdi_error.empty()) {
          cdi_error =
              absl::StrCat("stale spec ", cdi_->SpecPath(kind), " not removed: ", s.message());
        }
        configured.insert(kind);  // try again next time
      }
    }
    kinds_ = std::move(configured);
    int before = 0, after = 0;
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      before = cdi_health_.consecutive;
      after = Record(&cdi_health_, cdi_error);
      for (auto it = cdi_kind_failures_.begin(); it != cdi_kind_failures_.end();) {
        it = kind_error.count(it->first) ? std::next(it) : cdi_kind_failures_.erase(it);
      }
      for (auto& [kind, e] : kind_error) {
        auto& f = cdi_kind_failures_[kind];
        ++f.first;
        f.second = std::move(e);
      }
    }
    LogAttempt(Component::kCdi, "CDI specs", before, after, options_.attempts_before_failing,
               cdi_error, Backoff(after));
    worst = std::max(worst, after);
  }
  if (!options_.nfd_features_file.empty()) {
    std::string nfd_error;
    if (absl::Status s = nfd::WriteFeatures(options_.nfd_features_file, view.node.inventory);
        !s.ok()) {
      nfd_error = absl::StrCat(options_.nfd_features_file, ": ", s.message());
    }
    int before = 0, after = 0;
    {
      std::lock_guard<std::mutex> lock(health_mu_);
      before = nfd_health_.consecutive;
      after = Record(&nfd_health_, nfd_error);
    }
    LogAttempt(Component::kAgent, "NFD feature file", before, after,
               options_.attempts_before_failing, nfd_error, Backoff(after));
    worst = std::max(worst, after);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (worst == 0) {
    retry_at_.reset();
  } else {
    retry_at_ = std::chrono::steady_clock::now() + Backoff(worst);
  }
}

}  // namespace fabric
