#include "agent/sampler/sampler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/base/utf8.h"

namespace fabric::sampler {
namespace {

// A hw counter's value: summed over the ports that have it, else the
// device-level file (EFA keeps traffic under ports/1 on current kernels and
// at device level on none, but older kernels put everything under the port).
std::optional<uint64_t> HwValue(const std::vector<CounterValue>& hw, const std::string& name) {
  std::optional<uint64_t> device_level;
  uint64_t port_sum = 0;
  bool at_port = false;
  for (const CounterValue& c : hw) {
    if (c.name != name) continue;
    if (c.port == "0") {
      device_level = c.value;
    } else {
      port_sum += c.value;
      at_port = true;
    }
  }
  if (at_port) return port_sum;
  return device_level;
}

// A PMA counter summed over the ports; nullopt when no port has it.
std::optional<uint64_t> PmaSum(const std::vector<CounterValue>& pma, const std::string& name) {
  std::optional<uint64_t> sum;
  for (const CounterValue& c : pma) {
    if (c.name == name) sum = sum.value_or(0) + c.value;
  }
  return sum;
}

// a + b where either exists; nullopt when neither does.
std::optional<uint64_t> SumOf(std::optional<uint64_t> a, std::optional<uint64_t> b) {
  if (!a && !b) return std::nullopt;
  return a.value_or(0) + b.value_or(0);
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

void Add(Owned* o, const restrack::RdmaResource& r) {
  switch (r.kind) {
    case restrack::ResourceKind::kQp:
      ++o->qp;
      if (restrack::QpCanMoveBytes(r) && !restrack::IsStackInternalQp(r)) ++o->qp_active;
      break;
    case restrack::ResourceKind::kCq:
      ++o->cq;
      break;
    case restrack::ResourceKind::kMr:
      ++o->mr;
      o->mr_bytes = SaturatingAdd(o->mr_bytes, r.mr_bytes);
      break;
    case restrack::ResourceKind::kPd:
      ++o->pd;
      break;
    case restrack::ResourceKind::kCtx:  // an owner's record, no resource of its own
      break;
  }
}

void AddPid(std::vector<uint32_t>* pids, uint32_t pid) {
  if (std::find(pids->begin(), pids->end(), pid) == pids->end()) pids->push_back(pid);
}

auto Key(const podprocs::CgroupIdentity& id) {
  return std::tie(id.pod_uid, id.container_id, id.runtime);
}

// How many of a Pod's processes are tried, lowest PID first, when the one
// picked exits between the scan and the read of its netns.
constexpr int kPodNetAttempts = 3;

}  // namespace

DeviceTraffic TrafficOf(const RdmaDevice& dev, const DeviceCounters& counters) {
  DeviceTraffic t;
  t.device = dev.name;
  t.kind = dev.kind;
  const auto& hw = counters.hw;
  const auto& pma = counters.pma;
  if (dev.kind == DeviceKind::kEfa) {
    t.bytes = SumOf(HwValue(hw, "tx_bytes"), HwValue(hw, "rx_bytes"));
    t.packets = SumOf(HwValue(hw, "tx_pkts"), HwValue(hw, "rx_pkts"));
    for (const char* name : {"rdma_read_bytes", "rdma_read_resp_bytes", "rdma_write_bytes",
                             "rdma_write_recv_bytes", "send_bytes", "recv_bytes"}) {
      if (auto v = HwValue(hw, name)) t.split[name] = *v;
    }
    return t;
  }
  // IB PMA (mlx5, IB and RoCE): the data counters count 4-octet words.
  if (auto words = SumOf(PmaSum(pma, "port_xmit_data"), PmaSum(pma, "port_rcv_data"))) {
    t.bytes = *words * 4;
  }
  t.packets = SumOf(PmaSum(pma, "port_xmit_packets"), PmaSum(pma, "port_rcv_packets"));
  if (!t.packets) {
    // rxe (soft-RoCE): no PMA and no byte counter, packets only.
    t.packets = SumOf(HwValue(hw, "sent_pkts"), HwValue(hw, "rcvd_pkts"));
  }
  return t;
}

namespace {

// Every device's counters, read once, and its traffic from them.
void ReadCounters(CounterReader& reader, const std::vector<RdmaDevice>& devices, Sample* s) {
  std::set<std::string> live;
  s->counters.reserve(devices.size());
  s->traffic.reserve(devices.size());
  for (const RdmaDevice& d : devices) {
    live.insert(d.name);
    DeviceCounters c;
    c.device = d.name;
    const CounterReader::ReadResult r = reader.Read(d, &c.hw, &c.pma);
    DeviceTraffic t = TrafficOf(d, c);
    t.readable = r.read > 0;
    if (!t.readable) t.error = r.first_error;
    s->counters.push_back(std::move(c));
    s->traffic.push_back(std::move(t));
  }
  reader.Retain(live);
}

}  // namespace

SamplePtr SampleCountersOnce(const HostPaths& paths, const std::vector<RdmaDevice>& devices,
                             CounterFiles* files) {
  CounterReader reader(paths, files);
  auto s = std::make_shared<Sample>();
  s->mono = MonotonicNow();
  s->wall = absl::Now();
  ReadCounters(reader, devices, s.get());
  return s;
}

Sampler::Sampler(SamplerOptions options, SamplerInputs inputs, restrack::ResourceSource* resources,
                 podprocs::ProcSource* procs)
    : options_(std::move(options)),
      inputs_(std::move(inputs)),
      resources_(resources),
      procs_(procs),
      // Room for the longest window plus the samples on both of its edges.
      capacity_(static_cast<size_t>(std::ceil(absl::FDivDuration(
                    options_.max_window, std::max(options_.period, absl::Milliseconds(1))))) +
                2),
      reader_(options_.paths, options_.files, options_.relist_interval),
      ring_(capacity_) {}

Sampler::~Sampler() { Stop(); }

void Sampler::Start() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = false;
  }
  const auto period = absl::ToChronoNanoseconds(options_.period);
  thread_ = std::thread([this, period] {
    auto next = std::chrono::steady_clock::now();
    while (true) {
      next += period;
      {
        std::unique_lock<std::mutex> lock(stop_mu_);
        if (stop_cv_.wait_until(lock, next, [this] { return stop_; })) return;
      }
      TakeNow();
      // A round that overran its period starts the next one a period later,
      // not in a burst of catch-up rounds.
      const auto now = std::chrono::steady_clock::now();
      if (next < now) next = now;
    }
  });
}

void Sampler::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Sampler::OnSample(Hook hook) {
  std::lock_guard<std::mutex> lock(mu_);
  hook_ = std::move(hook);
}

SamplePtr Sampler::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_;
}

void Sampler::ReadRing(absl::FunctionRef<void(const SampleRing&)> read) const {
  std::shared_lock<std::shared_mutex> lock(ring_mu_);
  read(ring_);
}

SamplerStatus Sampler::status() const {
  SamplerStatus st;
  {
    std::lock_guard<std::mutex> lock(mu_);
    st = status_;
  }
  // Counted when asked (a scrape), not every round.
  ReadRing([&](const SampleRing& ring) { st.ring_bytes = ring.MemoryBytes(); });
  return st;
}

SamplePtr Sampler::TakeNow() {
  std::lock_guard<std::mutex> round(round_mu_);
  const auto started = std::chrono::steady_clock::now();
  SamplePtr sample = Round();
  {
    std::unique_lock<std::shared_mutex> lock(ring_mu_);
    ring_.Append(*sample);
  }
  const absl::Duration took = absl::FromChrono(std::chrono::steady_clock::now() - started);
  Hook hook;
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = sample;
    status_.rounds++;
    status_.last_round = took;
    status_.last_sample_mono = sample->mono;
    status_.unreadable_devices = 0;
    for (const DeviceTraffic& t : sample->traffic) {
      if (t.readable) continue;
      status_.unreadable_devices++;
      status_.last_counter_error = t.error;
    }
    status_.last_resources_error = sample->resources_ok ? "" : sample->resources_error;
    status_.last_procs_error = sample->procs_ok ? "" : sample->procs_error;
    hook = hook_;
  }
  if (hook) {
    std::shared_lock<std::shared_mutex> lock(ring_mu_);
    hook(ring_);
  }
  return sample;
}

SamplePtr Sampler::Round() {
  auto s = std::make_shared<Sample>();
  s->seq = ++seq_;
  s->mono = options_.clock();
  s->wall = options_.wall_clock();
  const std::vector<RdmaDevice> devices =
      inputs_.devices ? inputs_.devices() : std::vector<RdmaDevice>{};
  ReadCounters(reader_, devices, s.get());
  // The scan first: it checks each listed PID's instance, so the resources'
  // owners among them are identified without another read.
  std::vector<podprocs::CgroupIdentity> seen;
  ReadPods(s.get(), &seen);
  ReadResources(s.get(), &seen);
  ReadNames(s.get(), &seen);
  if (inputs_.grants) s->grants = inputs_.grants();
  if (inputs_.holds) {
    HoldsState h = inputs_.holds();
    s->holds_complete = h.complete;
    s->holds_incomplete_reason = std::move(h.reason);
  }
  return s;
}

void Sampler::ReadResources(Sample* s, std::vector<podprocs::CgroupIdentity>* seen) {
  if (resources_ == nullptr) {
    s->resources_error = kObservationOff;
    return;
  }
  auto dump = resources_->Dump();
  if (!dump.ok()) {
    s->resources_error = std::string(dump.status().message());
    return;
  }
  s->resources_ok = true;
  s->resources_failed = resources_->LastDumpNotes().failed_devices;

  // The kernel names a resource's creating thread; each is resolved to its
  // process, and each process identified, once per round.
  struct Owner {
    enum { kPod, kHost, kExited, kUnreadable } what = kExited;
    uint32_t pid = 0;  // the thread group
    podprocs::CgroupIdentity id;
    std::string comm;
  };
  std::map<uint32_t, Owner> by_task;
  std::map<uint32_t, const Owner*> by_process;
  std::set<uint32_t> exited, unreadable;
  auto note_error = [&](uint32_t task, const absl::Status& st) {
    unreadable.insert(task);
    if (s->owner_error.empty()) s->owner_error = std::string(st.message());
  };
  auto identify = [&](uint32_t task) -> const Owner& {
    auto [it, added] = by_task.try_emplace(task);
    Owner& o = it->second;
    if (!added) return o;
    if (procs_ == nullptr) {  // no /proc: the owner cannot be told
      o.what = Owner::kUnreadable;
      return o;
    }
    absl::StatusOr<uint32_t> tgid = procs_->ProcessOf(task);
    if (!tgid.ok()) {
      if (absl::IsNotFound(tgid.status())) {
        exited.insert(task);
      } else {
        o.what = Owner::kUnreadable;
        note_error(task, tgid.status());
      }
      return o;
    }
    if (auto known = by_process.find(*tgid); known != by_process.end()) {
      o = *known->second;
      return o;
    }
    o.pid = *tgid;
    auto p = procs_->Identify(o.pid);
    if (p.ok()) {
      o.what = Owner::kPod;
      o.id = std::move(p->identity);
    } else if (absl::IsNotFound(p.status())) {
      // Not in a Pod, or gone: a process that is gone has no comm either.
      std::string comm = procs_->Comm(o.pid);
      if (comm.empty()) {
        exited.insert(task);
      } else {
        o.what = Owner::kHost;
        o.comm = SanitizeUtf8(comm);
      }
    } else {
      o.what = Owner::kUnreadable;
      note_error(task, p.status());
    }
    by_process[o.pid] = &o;
    return o;
  };

  // The kernel names the thread that created a resource, and none once that
  // thread has exited (an engine's connection threads). What it was made in
  // still names an owner: a QP's or MR's PD, a PD's or CQ's device context
  // (the process that opened the device). Numbers are per device.
  using Link = std::pair<std::string, uint32_t>;  // (device, pdn or ctxn)
  std::map<Link, const restrack::RdmaResource*> pds, ctxs;
  for (const restrack::RdmaResource& r : *dump) {
    if (!r.kern_name.empty()) continue;
    if (r.kind == restrack::ResourceKind::kPd) pds[{r.device, r.id}] = &r;
    if (r.kind == restrack::ResourceKind::kCtx) ctxs[{r.device, r.id}] = &r;
  }
  // The owners that stand in for `r`'s, nearest first.
  auto stand_ins = [&](const restrack::RdmaResource& r) {
    std::vector<uint32_t> out;
    std::optional<uint32_t> ctxn = r.ctxn;
    if (r.pdn) {
      if (auto pd = pds.find({r.device, *r.pdn}); pd != pds.end()) {
        if (pd->second->pid != 0) out.push_back(pd->second->pid);
        if (!ctxn) ctxn = pd->second->ctxn;
      }
    }
    if (ctxn) {
      if (auto ctx = ctxs.find({r.device, *ctxn}); ctx != ctxs.end() && ctx->second->pid != 0) {
        out.push_back(ctx->second->pid);
      }
    }
    return out;
  };
  auto known = [](const Owner& o) { return o.what == Owner::kPod || o.what == Owner::kHost; };

  std::map<std::tuple<std::string, std::string, std::string>, ContainerOwned> by_container;
  std::map<std::pair<uint32_t, std::string>, HostOwned> by_host;
  // Where a (process, device)'s resources add up: found once per pair, not
  // once per resource (a node has thousands of resources, dumped device by
  // device, and a few owners per device).
  std::map<uint32_t, Owned*> into;  // by process, for the device in hand
  std::string device;
  for (const restrack::RdmaResource& r : *dump) {
    if (r.kind == restrack::ResourceKind::kCtx) continue;  // an owner's record, not a resource
    if (r.device != device) {
      device = r.device;
      into.clear();
    }
    if (r.pid == 0 && !r.kern_name.empty()) {
      Add(&s->kernel_owned[r.device][r.kern_name], r);
      continue;
    }
    const Owner* found = nullptr;
    bool adopted = false;
    if (r.pid != 0) {
      if (const Owner& o = identify(r.pid); known(o)) found = &o;
    }
    if (found == nullptr) {
      for (uint32_t pid : stand_ins(r)) {
        if (const Owner& o = identify(pid); known(o)) {
          found = &o;
          adopted = true;
          break;
        }
      }
    }
    if (found == nullptr) {
      // Its creating thread is gone or not visible, exited or unreadable,
      // and neither its PD nor its context names one that can be told.
      Add(&s->unattributed[r.device], r);
      continue;
    }
    const Owner& o = *found;
    Owned*& sum = into[o.pid];
    if (sum == nullptr) {
      if (o.what == Owner::kPod) {
        ContainerOwned& c = by_container[{o.id.pod_uid, o.id.container_id, r.device}];
        if (c.pod_uid.empty()) {
          c.pod_uid = o.id.pod_uid;
          c.container_id = o.id.container_id;
          c.device = r.device;
          seen->push_back(o.id);
        }
        AddPid(&c.pids, o.pid);
        sum = &c.owned;
      } else {
        HostOwned& h = by_host[{o.pid, r.device}];
        if (h.pid == 0) {
          h.pid = o.pid;
          h.comm = o.comm;
          h.device = r.device;
        }
        sum = &h.owned;
      }
    }
    Add(sum, r);
    if (adopted) ++sum->adopted;
  }
  s->owners_exited = static_cast<uint32_t>(exited.size());
  s->owners_unreadable = static_cast<uint32_t>(unreadable.size());
  for (auto& [key, c] : by_container) {
    std::sort(c.pids.begin(), c.pids.end());
    s->owned.push_back(std::move(c));
  }
  for (auto& [key, h] : by_host) s->host_owned.push_back(std::move(h));
}

void Sampler::ReadPods(Sample* s, std::vector<podprocs::CgroupIdentity>* seen) {
  if (procs_ == nullptr) {
    s->procs_error = kObservationOff;
    return;
  }
  auto scan = procs_->ScanPods();
  if (!scan.ok()) {
    s->procs_error = std::string(scan.status().message());
  } else {
    s->procs_ok = true;
    // By Pod, viewing the scan's strings (a node has thousands of processes).
    struct PodScan {
      std::vector<uint32_t> pids;
      std::set<std::string_view> containers;
    };
    std::map<std::string_view, PodScan> by_pod;
    for (const podprocs::PodProcess& p : *scan) {
      if (p.identity.pod_uid.empty()) continue;
      PodScan& pod = by_pod[p.identity.pod_uid];
      pod.pids.push_back(p.pid);
      if (pod.containers.insert(p.identity.container_id).second) seen->push_back(p.identity);
    }
    for (auto& [uid, pod] : by_pod) {
      std::vector<uint32_t>& pids = pod.pids;
      std::sort(pids.begin(), pids.end());
      PodNet net;
      net.pod_uid = std::string(uid);
      for (std::string_view id : pod.containers) {
        if (!id.empty()) net.container_ids.emplace_back(id);
      }
      // The lowest PID (the sandbox's pause process, usually): its netns is
      // the Pod's. One that exits meanwhile gives way to the next.
      for (size_t i = 0; i < pids.size() && i < kPodNetAttempts; ++i) {
        net.pid = pids[i];
        net.error.clear();
        auto host = procs_->InHostNetns(net.pid);
        if (!host.ok()) {
          net.error = std::string(host.status().message());
          // Gone, or not ours to inspect: another process of the Pod may be.
          if (absl::IsNotFound(host.status()) || absl::IsPermissionDenied(host.status())) continue;
          break;
        }
        if (*host) {
          // A hostNetwork Pod: its bytes are the node's, not its own.
          net.host_network = true;
          net.readable = true;
          break;
        }
        auto bytes = procs_->NetDevBytes(net.pid);
        if (!bytes.ok()) {
          net.error = std::string(bytes.status().message());
          if (absl::IsNotFound(bytes.status())) continue;
          break;
        }
        net.readable = true;
        net.rx_bytes = bytes->rx_bytes;
        net.tx_bytes = bytes->tx_bytes;
        break;
      }
      s->pods.push_back(std::move(net));
    }
  }
}

void Sampler::ReadNames(Sample* s, std::vector<podprocs::CgroupIdentity>* seen) {
  if (procs_ == nullptr) return;
  // Names, once per container seen by either source.
  std::sort(seen->begin(), seen->end(),
            [](const auto& a, const auto& b) { return Key(a) < Key(b); });
  seen->erase(std::unique(seen->begin(), seen->end()), seen->end());
  for (const podprocs::CgroupIdentity& id : *seen) {
    std::optional<podprocs::ContainerNames> n = procs_->Names(id);
    if (!n) continue;
    PodNames& names = s->names[id.pod_uid];
    if (names.ns.empty()) names.ns = SanitizeUtf8(n->ns);
    if (names.pod.empty()) names.pod = SanitizeUtf8(n->pod);
    if (id.container_id.empty()) continue;
    if (n->sandbox) {
      names.sandboxes.insert(id.container_id);
    } else if (!n->container.empty()) {
      names.containers[id.container_id] = SanitizeUtf8(n->container);
    }
  }
}

}  // namespace fabric::sampler
