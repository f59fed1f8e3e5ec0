#include "agent/doctor/fabric_prober.h"

#include <fmt/format.h>
#include <poll.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/logging.h"
#include "agent/libfabric/fabric_error.h"
#include "agent/libfabric/fi_handles.h"
#include "agent/libfabric/libfabric_api.h"

namespace fabric::doctor {

using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kSlotBytes = 128;  // >= kMaxProbeMessage
constexpr size_t kSendSlots = 64;
constexpr size_t kRecvSlots = 32;
// Sends to one destination not completed yet before a new probe to it counts
// as "still queued". A send completion can trail its reply (the provider
// completes it on its own progress), so one is not enough.
constexpr int kMaxInFlightPerPeer = 3;
static_assert(kSlotBytes >= kMaxProbeMessage);

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

struct Slot {
  fi_context2 context;  // first: the completion's op_context is the slot
  bool recv = false;
  bool busy = false;
  size_t index = 0;
  Clock::time_point posted;
  fi_addr_t to = FI_ADDR_UNSPEC;
  uint64_t nonce = 0;     // 0 for replies and raw sends
  bool orphaned = false;  // stuck: its destination was reset; never reused until it completes
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr size_t kPaddedAddress = 256;  // > kMaxEndpointName, > any sockaddr
static_assert(kPaddedAddress > kMaxEndpointName);

}  // namespace

struct FabricProber::Device {
  LocalDeviceSpec spec;
  std::string provider;                       // as opened
  std::string error;                          // why not open
  std::unique_ptr<char, FreeDeleter> buffer;  // first: freed after the MR closes
  fi::InfoPtr info;
  fi::FidPtr<fid_fabric> fabric;
  fi::FidPtr<fid_domain> domain;
  fi::FidPtr<fid_cq> cq;
  fi::FidPtr<fid_av> av;
  fi::FidPtr<fid_ep> ep;
  fi::FidPtr<fid_mr> mr;
  void* desc = nullptr;
  int wait_fd = -1;  // the CQ's wait fd (FI_WAIT_FD), -1 when the provider has none
  std::string name;
  size_t addrlen = 0;  // the provider's address length (info->src_addrlen, = our name's)
  std::string address;
  std::vector<Slot> send_slots = std::vector<Slot>(kSendSlots);
  std::vector<Slot> recv_slots = std::vector<Slot>(kRecvSlots);
  std::map<std::string, fi_addr_t> av_cache;
  std::map<fi_addr_t, int> in_flight;  // probes (not replies) per destination
  double tokens = 0;
  Clock::time_point refill;
  bool open() const { return ep != nullptr; }
  char* SlotBuffer(const Slot& s) const {
    return buffer.get() + (s.recv ? kSendSlots + s.index : s.index) * kSlotBytes;
  }
  void Close() {
    wait_fd = -1;
    mr.reset();  // the MR before the endpoint's domain; fid order below
    ep.reset();
    av.reset();
    cq.reset();
    domain.reset();
    fabric.reset();
    info.reset();
    av_cache.clear();
    in_flight.clear();
    for (Slot& s : send_slots) s.busy = s.orphaned = false;
  }
};

namespace {

// Whether a peer's endpoint name may be handed to fi_av_insert on `d`: exactly
// the provider's address length (fi_av_insert takes no length and reads as
// many bytes as the provider's address format has), and for socket addresses
// the same family as ours (the provider sizes those by their family).
absl::Status AddressFits(const FabricProber::Device& d, const std::string& name) {
  if (name.size() != d.addrlen) {
    return absl::InvalidArgumentError(
        fmt::format("peer endpoint name is {} bytes; the {} provider's addresses are {} bytes",
                    name.size(), d.provider, d.addrlen));
  }
  const uint32_t format = d.info ? d.info->addr_format : uint32_t{FI_FORMAT_UNSPEC};
  if ((format == FI_SOCKADDR || format == FI_SOCKADDR_IN || format == FI_SOCKADDR_IN6) &&
      name.size() >= sizeof(sa_family_t) && d.name.size() >= sizeof(sa_family_t) &&
      std::memcmp(name.data(), d.name.data(), sizeof(sa_family_t)) != 0) {
    return absl::InvalidArgumentError("peer endpoint name is another address family than ours");
  }
  return absl::OkStatus();
}

}  // namespace

struct FabricProber::Batch {
  std::vector<ProbeRequest> requests;
  std::vector<ProbeResult> results;  // guarded by mu_
  std::vector<int> state;            // thread only: 0 waiting to post, 1 posted, 2 done
  size_t remaining = 0;              // guarded by mu_
  Clock::time_point deadline;
};

namespace {

absl::Status OpenDevice(FabricProber::Device& d) {
  if (absl::Status loaded = fi::Load(); !loaded.ok()) return loaded;
  fi::InfoPtr hints(fi::AllocInfo());
  if (!hints) return absl::ResourceExhaustedError("fi_allocinfo failed");
  hints->caps = FI_MSG;
  hints->ep_attr->type = FI_EP_RDM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;
  hints->fabric_attr->prov_name = strdup(d.spec.provider.c_str());
  if (!d.spec.domain.empty()) hints->domain_attr->name = strdup(d.spec.domain.c_str());
  fi_info* raw = nullptr;
  int ret = -FI_ENODATA;
  if (!d.spec.node.empty()) {
    ret = fi::GetInfo(fi::kFabricApiVersion, d.spec.node.c_str(), nullptr, FI_SOURCE, hints.get(),
                      &raw);
  } else {
    ret = fi::GetInfo(fi::kFabricApiVersion, nullptr, nullptr, 0, hints.get(), &raw);
  }
  fi::InfoPtr list(raw);
  if (ret != 0) {
    return FabricError(ret, fmt::format("fi_getinfo(provider {}{}{})", d.spec.provider,
                                        d.spec.domain.empty() ? "" : ", domain " + d.spec.domain,
                                        d.spec.node.empty() ? "" : ", node " + d.spec.node));
  }
  d.info.reset(fi::DupInfo(list.get()));
  if (!d.info) return absl::ResourceExhaustedError("fi_dupinfo failed");
  d.provider = d.info->fabric_attr->prov_name;
  // The same rule as `fabricctl bench`: never measure another provider.
  std::string core = d.provider.substr(0, d.provider.find(';'));
  if (d.provider != d.spec.provider && core != d.spec.provider) {
    return absl::FailedPreconditionError(fmt::format(
        "requested provider '{}' but libfabric offered '{}'; refusing to probe another provider",
        d.spec.provider, d.provider));
  }
  fid_fabric* fabric = nullptr;
  if (int r = fi::Fabric(d.info->fabric_attr, &fabric, nullptr); r != 0) {
    return FabricError(r, "fi_fabric");
  }
  d.fabric.reset(fabric);
  fid_domain* domain = nullptr;
  if (int r = fi_domain(fabric, d.info.get(), &domain, nullptr); r != 0) {
    return FabricError(r, "fi_domain");
  }
  d.domain.reset(domain);
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_MSG;
  cq_attr.size = kSendSlots + kRecvSlots + 16;
  // A wait fd lets the idle progress thread sleep in poll() instead of
  // polling every CQ each millisecond; providers without one (efa) poll.
  cq_attr.wait_obj = FI_WAIT_FD;
  fid_cq* cq = nullptr;
  if (fi_cq_open(domain, &cq_attr, &cq, nullptr) != 0) {
    cq = nullptr;
    cq_attr.wait_obj = FI_WAIT_NONE;
    if (int r = fi_cq_open(domain, &cq_attr, &cq, nullptr); r != 0) {
      return FabricError(r, "fi_cq_open");
    }
  }
  d.cq.reset(cq);
  d.wait_fd = -1;
  if (cq_attr.wait_obj == FI_WAIT_FD) {
    int fd = -1;
    if (fi_control(&cq->fid, FI_GETWAIT, &fd) == 0 && fd >= 0) d.wait_fd = fd;
  }
  fi_av_attr av_attr{};
  av_attr.type =
      d.info->domain_attr->av_type != FI_AV_UNSPEC ? d.info->domain_attr->av_type : FI_AV_TABLE;
  av_attr.count = 256;
  fid_av* av = nullptr;
  if (int r = fi_av_open(domain, &av_attr, &av, nullptr); r != 0) {
    return FabricError(r, "fi_av_open");
  }
  d.av.reset(av);
  fid_ep* ep = nullptr;
  if (int r = fi_endpoint(domain, d.info.get(), &ep, nullptr); r != 0) {
    return FabricError(r, "fi_endpoint");
  }
  d.ep.reset(ep);
  if (int r = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV); r != 0) {
    return FabricError(r, "fi_ep_bind(cq)");
  }
  if (int r = fi_ep_bind(ep, &av->fid, 0); r != 0) return FabricError(r, "fi_ep_bind(av)");
  if (int r = fi_enable(ep); r != 0) return FabricError(r, "fi_enable");
  // The dedicated probe buffer: (send + recv slots) x 128 bytes. Nothing else
  // is ever registered.
  const size_t bytes = (kSendSlots + kRecvSlots) * kSlotBytes;
  if (!d.buffer) {
    void* mem = nullptr;
    if (posix_memalign(&mem, 4096, bytes) != 0) return absl::ResourceExhaustedError("buffer");
    std::memset(mem, 0, bytes);
    d.buffer.reset(static_cast<char*>(mem));
  }
  const int mr_mode = d.info->domain_attr->mr_mode;
  if (mr_mode & FI_MR_LOCAL) {
    fid_mr* mr = nullptr;
    if (int r = fi_mr_reg(domain, d.buffer.get(), bytes, FI_SEND | FI_RECV, 0, 0, 0, &mr, nullptr);
        r != 0) {
      return FabricError(r, "fi_mr_reg(probe buffer)");
    }
    d.mr.reset(mr);
    if (mr_mode & FI_MR_ENDPOINT) {
      if (int r = fi_mr_bind(mr, &ep->fid, 0); r != 0) return FabricError(r, "fi_mr_bind");
      if (int r = fi_mr_enable(mr); r != 0) return FabricError(r, "fi_mr_enable");
    }
    d.desc = fi_mr_desc(mr);
  } else {
    d.desc = nullptr;
  }
  char name[256];
  size_t len = sizeof(name);
  if (int r = fi_getname(&ep->fid, name, &len); r != 0) return FabricError(r, "fi_getname");
  if (len > kMaxEndpointName) {
    return absl::OutOfRangeError(fmt::format("endpoint name of {} bytes is too long", len));
  }
  d.name.assign(name, len);
  // fi_av_insert reads src_addrlen bytes of a peer's name (no length is
  // passed); our own name must have that length too, or we could not check.
  d.addrlen = d.info->src_addrlen != 0 ? d.info->src_addrlen : len;
  if (d.addrlen != len || len == 0) {
    return absl::FailedPreconditionError(fmt::format(
        "endpoint name is {} bytes but the provider's address length is {}", len, d.addrlen));
  }
  char str[256];
  size_t slen = sizeof(str);
  d.address = fi_av_straddr(av, name, str, &slen) ? std::string(str) : "";
  for (size_t i = 0; i < kSendSlots; ++i) {
    d.send_slots[i] = Slot{};
    d.send_slots[i].index = i;
  }
  for (size_t i = 0; i < kRecvSlots; ++i) {
    d.recv_slots[i] = Slot{};
    d.recv_slots[i].recv = true;
    d.recv_slots[i].index = i;
    Slot& s = d.recv_slots[i];
    if (ssize_t r = fi_recv(ep, d.SlotBuffer(s), kSlotBytes, d.desc, FI_ADDR_UNSPEC, &s.context);
        r != 0) {
      return FabricError(static_cast<int>(r), "fi_recv");
    }
  }
  return absl::OkStatus();
}

}  // namespace

FabricProber::FabricProber(std::vector<LocalDeviceSpec> devices, ProberLimits limits)
    : specs_(std::move(devices)), limits_(limits) {}

FabricProber::~FabricProber() { Stop(); }

absl::Status FabricProber::Start() {
  // No setenv here: by now other threads run (fabric-agent's servers), and
  // setenv races with every getenv. FI_UNIVERSE_SIZE is set by the mains
  // before any thread starts (doctor::PrepareProcessEnvironment).
  size_t opened = 0;
  std::string errors;
  for (const LocalDeviceSpec& spec : specs_) {
    auto d = std::make_unique<Device>();
    d->spec = spec;
    if (absl::Status s = OpenDevice(*d); !s.ok()) {
      d->error = std::string(s.message());
      d->Close();
      LogWarn(Component::kAgent, "doctor: device {}: {}", spec.device, d->error);
      absl::StrAppend(&errors, errors.empty() ? "" : "; ", spec.device, ": ", d->error);
    } else {
      ++opened;
      LogInfo(Component::kAgent, "doctor: device {} probes over {} at {}", spec.device, d->provider,
              d->address);
    }
    d->tokens = limits_.reply_burst;
    d->refill = Clock::now();
    devices_.push_back(std::move(d));
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    endpoints_.clear();
    names_.clear();
    for (const auto& d : devices_) {
      endpoints_.push_back(
          {d->spec.device, d->open() ? d->provider : d->spec.provider, d->address, d->error});
      if (d->open()) names_.push_back({d->spec.device, d->provider, d->name});
    }
  }
  if (opened == 0) {
    return absl::FailedPreconditionError(
        specs_.empty() ? std::string("no fabric device to probe from") : errors);
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void FabricProber::Wake() {
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
  }
}

void FabricProber::Stop() {
  stop_ = true;
  cv_.notify_all();
  Wake();
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
  wake_fd_ = -1;
  for (auto& d : devices_) d->Close();
}

std::vector<LocalEndpoint> FabricProber::endpoints() const {
  std::lock_guard<std::mutex> lock(mu_);
  return endpoints_;
}

std::vector<DeviceEndpoint> FabricProber::names() const {
  std::lock_guard<std::mutex> lock(mu_);
  return names_;
}

void FabricProber::DropIntroduction(Source& src, std::map<std::string, Introduction>::iterator it) {
  for (const std::string& n : it->second.names) {
    auto s = senders_.find(n);
    if (s != senders_.end() && --s->second == 0) senders_.erase(s);
  }
  src.names -= it->second.names.size();
  sender_total_ -= it->second.names.size();
  src.askers.erase(it);
}

void FabricProber::AllowSenders(const std::string& source, const std::string& asker,
                                const std::vector<std::string>& names) {
  std::vector<std::string> unique(names.begin(), names.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  if (unique.size() > limits_.max_senders_per_source) {
    unique.resize(limits_.max_senders_per_source);
    counters_["allow_list_truncated"]++;
  }
  Source& src = sources_[source];
  if (auto it = src.askers.find(asker); it != src.askers.end()) DropIntroduction(src, it);
  // Room within this source: only its own least recently renewed entries go.
  while (!src.askers.empty() && src.names + unique.size() > limits_.max_senders_per_source) {
    auto oldest = src.askers.begin();
    for (auto it = src.askers.begin(); it != src.askers.end(); ++it) {
      if (it->second.renewed < oldest->second.renewed) oldest = it;
    }
    DropIntroduction(src, oldest);
    counters_["allow_list_evicted"]++;
  }
  // Room overall: other sources' entries go only once they are stale.
  if (sender_total_ + unique.size() > limits_.max_senders) {
    const auto stale = now - absl::ToChronoNanoseconds(limits_.sender_ttl);
    for (auto& [addr, other] : sources_) {
      for (auto it = other.askers.begin(); it != other.askers.end();) {
        auto next = std::next(it);
        if (it->second.renewed < stale) {
          DropIntroduction(other, it);
          counters_["allow_list_expired"]++;
        }
        it = next;
      }
    }
    std::erase_if(sources_,
                  [&](const auto& e) { return e.second.askers.empty() && &e.second != &src; });
  }
  if (sender_total_ + unique.size() > limits_.max_senders) {
    counters_["allow_list_full"]++;
    if (src.askers.empty()) sources_.erase(source);
    return;
  }
  for (const std::string& n : unique) senders_[n]++;
  src.names += unique.size();
  sender_total_ += unique.size();
  src.askers[asker] = {std::move(unique), now};
}

bool FabricProber::SenderAllowed(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return senders_.count(name) > 0;
}

std::map<std::string, uint64_t> FabricProber::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void FabricProber::Count(const std::string& event, uint64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  counters_[event] += n;
}

absl::Status FabricProber::SendRaw(size_t device, const std::string& peer_name,
                                   const std::string& bytes) {
  if (device >= specs_.size()) return absl::InvalidArgumentError("no such device");
  if (bytes.size() > kSlotBytes) return absl::InvalidArgumentError("at most 128 bytes");
  std::lock_guard<std::mutex> lock(mu_);
  raw_.push_back({device, {peer_name, bytes}});
  Wake();
  return absl::OkStatus();
}

std::vector<ProbeResult> FabricProber::Probe(const std::vector<ProbeRequest>& probes,
                                             absl::Duration timeout) {
  auto batch = std::make_shared<Batch>();
  batch->requests = probes;
  batch->results.resize(probes.size());
  batch->state.assign(probes.size(), 0);
  batch->remaining = probes.size();
  batch->deadline = Clock::now() + absl::ToChronoNanoseconds(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  if (probes.empty()) return {};
  if (!thread_.joinable()) {
    for (ProbeResult& r : batch->results) r = {false, -1, "fabric_error", "doctor not started"};
    return batch->results;
  }
  queued_.push_back(batch);
  Wake();
  // The thread finishes every probe by the deadline (timeouts included).
  cv_.wait(lock, [&] { return batch->remaining == 0 || stop_.load(); });
  for (size_t i = 0; i < batch->results.size(); ++i) {
    if (batch->results[i].reason.empty() && !batch->results[i].ok) {
      batch->results[i] = {false, -1, "stopped", "doctor stopping"};
    }
  }
  return batch->results;
}

void FabricProber::Run() {
  std::mt19937_64 rng(std::random_device{}());
  uint64_t next_nonce = rng() | 1;
  struct Outstanding {
    std::shared_ptr<Batch> batch;
    size_t index;
    size_t device;
    Clock::time_point sent;
  };
  std::map<uint64_t, Outstanding> outstanding;
  std::vector<std::shared_ptr<Batch>> active;

  auto finish = [&](Batch& b, size_t i, ProbeResult r) {
    if (b.state[i] == 2) return;
    b.state[i] = 2;
    {
      std::lock_guard<std::mutex> lock(mu_);
      b.results[i] = std::move(r);
      --b.remaining;
      if (!b.results[i].ok) counters_["probe_failures"]++;
    }
    cv_.notify_all();
  };
  auto lookup = [&](Device& d, const std::string& name) -> std::optional<fi_addr_t> {
    auto it = d.av_cache.find(name);
    if (it != d.av_cache.end()) return it->second;
    if (!AddressFits(d, name).ok()) return std::nullopt;
    if (d.av_cache.size() >= limits_.max_peers_av) {
      for (auto& [n, a] : d.av_cache) fi_av_remove(d.av.get(), &a, 1, 0);
      d.av_cache.clear();
      d.in_flight.clear();
    }
    // A zero-padded copy: a provider that sizes the address by its content
    // (a socket address' family) still never reads past our buffer.
    char padded[kPaddedAddress] = {};
    std::memcpy(padded, name.data(), name.size());
    fi_addr_t addr = FI_ADDR_UNSPEC;
    int n = fi_av_insert(d.av.get(), padded, 1, &addr, 0, nullptr);
    if (n != 1) return std::nullopt;
    d.av_cache[name] = addr;
    return addr;
  };
  auto free_send_slot = [](Device& d) -> Slot* {
    for (Slot& s : d.send_slots) {
      if (!s.busy) return &s;
    }
    return nullptr;
  };
  auto post_send = [&](Device& d, Slot& s, fi_addr_t to, const char* data, size_t len) {
    std::memcpy(d.SlotBuffer(s), data, len);
    ssize_t r = fi_send(d.ep.get(), d.SlotBuffer(s), len, d.desc, to, &s.context);
    if (r == 0) {
      s.busy = true;
      s.posted = Clock::now();
      s.to = to;
    }
    return r;
  };
  auto reopen = [&](size_t di) {
    Device& d = *devices_[di];
    for (auto it = outstanding.begin(); it != outstanding.end();) {
      if (it->second.device == di) {
        finish(*it->second.batch, it->second.index,
               {false, -1, "fabric_timeout", "no completion; endpoint reopened"});
        it = outstanding.erase(it);
      } else {
        ++it;
      }
    }
    d.Close();
    d.error.clear();
    if (absl::Status s = OpenDevice(d); !s.ok()) {
      d.error = std::string(s.message());
      d.Close();
    }
    Count("endpoint_reopens");
    std::lock_guard<std::mutex> lock(mu_);
    endpoints_[di] = {d.spec.device, d.open() ? d.provider : d.spec.provider, d.address, d.error};
    names_.clear();
    for (const auto& dev : devices_) {
      if (dev->open()) names_.push_back({dev->spec.device, dev->provider, dev->name});
    }
  };

  while (!stop_.load()) {
    bool busy = false;
    std::vector<std::pair<size_t, std::pair<std::string, std::string>>> raws;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!queued_.empty()) {
        active.push_back(queued_.front());
        queued_.pop_front();
      }
      raws.assign(raw_.begin(), raw_.end());
      raw_.clear();
    }
    for (auto& [di, pr] : raws) {
      Device& d = *devices_[di];
      if (!d.open()) continue;
      auto to = lookup(d, pr.first);
      Slot* s = free_send_slot(d);
      // Busy (no slot, or the provider is still connecting): again next pass.
      if (to && (s == nullptr ||
                 post_send(d, *s, *to, pr.second.data(), pr.second.size()) == -FI_EAGAIN)) {
        std::lock_guard<std::mutex> lock(mu_);
        raw_.push_back({di, pr});
      }
    }
    const Clock::time_point now = Clock::now();
    // Post what is waiting.
    for (auto& b : active) {
      for (size_t i = 0; i < b->requests.size(); ++i) {
        if (b->state[i] != 0) continue;
        const ProbeRequest& req = b->requests[i];
        if (req.device >= devices_.size() || !devices_[req.device]->open()) {
          finish(*b, i, {false, -1, "endpoint_closed", "local endpoint is not open"});
          continue;
        }
        Device& d = *devices_[req.device];
        if (absl::Status fits = AddressFits(d, req.peer_name); !fits.ok()) {
          finish(*b, i, {false, -1, "bad_address", std::string(fits.message())});
          continue;
        }
        auto to = lookup(d, req.peer_name);
        if (!to) {
          finish(*b, i, {false, -1, "bad_address", "fi_av_insert rejected the peer's name"});
          continue;
        }
        if (d.in_flight[*to] >= kMaxInFlightPerPeer) {
          finish(*b, i,
                 {false, -1, "fabric_timeout", "the previous probe is still queued (no path)"});
          continue;
        }
        Slot* s = free_send_slot(d);
        if (s == nullptr) continue;  // try again on the next pass
        uint64_t nonce = next_nonce;
        next_nonce += 2;
        char msg[kMaxProbeMessage];
        size_t len = EncodeProbe({ProbeKind::kProbe, nonce, d.name}, msg);
        ssize_t r = post_send(d, *s, *to, msg, len);
        if (r == -FI_EAGAIN) continue;
        if (r != 0) {
          finish(*b, i,
                 {false, -1, "fabric_error",
                  std::string(FabricError(static_cast<int>(r), "fi_send").message())});
          continue;
        }
        s->nonce = nonce;
        d.in_flight[*to]++;
        b->state[i] = 1;
        outstanding[nonce] = {b, i, req.device, now};
        Count("probes_sent");
        busy = true;
      }
    }
    // Progress and completions.
    for (size_t di = 0; di < devices_.size(); ++di) {
      Device& d = *devices_[di];
      if (!d.open()) continue;
      fi_cq_msg_entry entries[32];
      ssize_t n = fi_cq_read(d.cq.get(), entries, 32);
      std::vector<Slot*> done;
      if (n > 0) {
        busy = true;
        for (ssize_t k = 0; k < n; ++k) {
          Slot* s = static_cast<Slot*>(entries[k].op_context);
          if (s == nullptr) continue;
          if (!s->recv) {
            if (s->nonce != 0 && !s->orphaned) d.in_flight[s->to]--;
            s->busy = s->orphaned = false;
            s->nonce = 0;
            continue;
          }
          // A received message: decode, answer or complete, repost.
          const char* data = d.SlotBuffer(*s);
          auto m = DecodeProbe(data, entries[k].len);
          if (!m.ok()) {
            Count("garbage_fabric");
          } else if (m->kind == ProbeKind::kReply) {
            auto it = outstanding.find(m->nonce);
            if (it == outstanding.end()) {
              Count("stale_replies");
            } else {
              double rtt = Seconds(Clock::now() - it->second.sent);
              finish(*it->second.batch, it->second.index, {true, rtt, "", ""});
              outstanding.erase(it);
            }
          } else {
            bool known;
            {
              std::lock_guard<std::mutex> lock(mu_);
              known = senders_.count(m->sender) > 0;
            }
            Clock::time_point t = Clock::now();
            d.tokens = std::min(limits_.reply_burst,
                                d.tokens + Seconds(t - d.refill) * limits_.reply_rate);
            d.refill = t;
            if (!known) {
              Count("unknown_sender");
            } else if (d.tokens < 1) {
              Count("rate_limited");
            } else {
              auto to = lookup(d, m->sender);
              Slot* out = free_send_slot(d);
              if (!to || out == nullptr) {
                Count("reply_dropped");
              } else {
                d.tokens -= 1;
                char msg[kMaxProbeMessage];
                size_t len = EncodeProbe({ProbeKind::kReply, m->nonce, d.name}, msg);
                if (post_send(d, *out, *to, msg, len) == 0) {
                  Count("replies_sent");
                } else {
                  Count("reply_dropped");
                }
              }
            }
          }
          done.push_back(s);
        }
      } else if (n == -FI_EAVAIL) {
        busy = true;
        fi_cq_err_entry err{};
        if (fi_cq_readerr(d.cq.get(), &err, 0) > 0) {
          Slot* s = static_cast<Slot*>(err.op_context);
          const char* detail = fi_cq_strerror(d.cq.get(), err.prov_errno, err.err_data, nullptr, 0);
          std::string why = fmt::format("{} ({})", fi::StrError(err.err), detail ? detail : "?");
          if (s != nullptr && s->recv) {
            Count("garbage_fabric");  // e.g. FI_ETRUNC: a message larger than a probe
            done.push_back(s);
          } else if (s != nullptr && s->orphaned) {
            s->busy = s->orphaned = false;
            s->nonce = 0;
          } else if (s != nullptr) {
            if (s->nonce != 0) {
              d.in_flight[s->to]--;
              auto it = outstanding.find(s->nonce);
              if (it != outstanding.end()) {
                finish(*it->second.batch, it->second.index, {false, -1, "fabric_error", why});
                outstanding.erase(it);
              }
            }
            s->busy = false;
            s->nonce = 0;
          }
        }
      } else if (n < 0 && n != -FI_EAGAIN) {
        Count("cq_errors");
      }
      for (Slot* s : done) {
        ssize_t r =
            fi_recv(d.ep.get(), d.SlotBuffer(*s), kSlotBytes, d.desc, FI_ADDR_UNSPEC, &s->context);
        if (r != 0) Count("recv_repost_errors");
      }
    }
    // Deadlines.
    const Clock::time_point after = Clock::now();
    for (auto it = outstanding.begin(); it != outstanding.end();) {
      if (after > it->second.batch->deadline) {
        finish(*it->second.batch, it->second.index,
               {false, -1, "fabric_timeout", "no reply within the probe timeout"});
        it = outstanding.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& b : active) {
      if (after <= b->deadline) continue;
      for (size_t i = 0; i < b->requests.size(); ++i) {
        if (b->state[i] == 0) {
          finish(*b, i, {false, -1, "fabric_timeout", "could not post within the probe timeout"});
        }
      }
    }
    std::erase_if(active, [](const std::shared_ptr<Batch>& b) {
      for (int s : b->state) {
        if (s != 2) return false;
      }
      return true;
    });
    // A send that never completes (no connection: SYNs dropped) would hold
    // its destination forever: forget that destination (fi_av_remove drops
    // the provider's connection; the next probe inserts it again and connects
    // afresh), keep the slot out of use until it completes, and only when a
    // quarter of the slots are stuck start over with a fresh endpoint.
    const auto stuck = absl::ToChronoNanoseconds(limits_.stuck_after);
    for (size_t di = 0; di < devices_.size(); ++di) {
      Device& d = *devices_[di];
      if (!d.open()) continue;
      size_t free_slots = 0;
      for (Slot& s : d.send_slots) {
        if (!s.busy) {
          ++free_slots;
          continue;
        }
        if (s.orphaned || after - s.posted <= stuck) continue;
        const fi_addr_t x = s.to;
        for (Slot& o : d.send_slots) {
          if (o.busy && o.to == x) o.orphaned = true;
        }
        d.in_flight.erase(x);
        for (auto it = d.av_cache.begin(); it != d.av_cache.end();) {
          if (it->second == x) {
            fi_addr_t a = x;
            fi_av_remove(d.av.get(), &a, 1, 0);
            it = d.av_cache.erase(it);
          } else {
            ++it;
          }
        }
        Count("peer_resets");
      }
      if (free_slots < kSendSlots / 4) reopen(di);
    }
    bool unposted = false;
    for (const auto& b : active) {
      for (int st : b->state) unposted = unposted || st == 0;
    }
    if (busy) continue;
    if (!outstanding.empty() || unposted) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));  // an RTT is running
      continue;
    }
    // Idle. With wait fds everywhere: sleep in poll() until a CQ, a new batch
    // or 100 ms (stuck sends, timeouts); fi_trywait says whether it is safe.
    std::vector<pollfd> fds;
    bool can_wait = wake_fd_ >= 0;
    for (auto& dp : devices_) {
      Device& d = *dp;
      if (!d.open()) continue;
      if (d.wait_fd < 0) {
        can_wait = false;
        break;
      }
      fid* f = &d.cq->fid;
      if (fi_trywait(d.fabric.get(), &f, 1) != FI_SUCCESS) {
        can_wait = false;
        break;
      }
      fds.push_back({d.wait_fd, POLLIN, 0});
    }
    if (!can_wait) {
      std::this_thread::sleep_for(std::chrono::microseconds(1000));
      continue;
    }
    fds.push_back({wake_fd_, POLLIN, 0});
    if (poll(fds.data(), fds.size(), 100) > 0 && fds.back().revents) {
      uint64_t drained;
      (void)!read(wake_fd_, &drained, sizeof(drained));
    }
  }
  for (auto& [nonce, o] : outstanding) {
    finish(*o.batch, o.index, {false, -1, "stopped", "doctor stopping"});
  }
  for (auto& b : active) {
    for (size_t i = 0; i < b->requests.size(); ++i) {
      finish(*b, i, {false, -1, "stopped", "doctor stopping"});
    }
  }
}

}  // namespace fabric::doctor
