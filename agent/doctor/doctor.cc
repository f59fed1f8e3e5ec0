#include "agent/doctor/doctor.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "agent/base/json_text.h"
#include "agent/base/logging.h"
#include "agent/base/utf8.h"
#include "agent/doctor/scheme.h"

namespace fabric::doctor {
namespace {

std::string Core(const std::string& provider) { return provider.substr(0, provider.find(';')); }

double Unix(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

}  // namespace

void PrepareProcessEnvironment() {
  // ofi_rxm over verbs sizes CQs by FI_UNIVERSE_SIZE (see fabricctl bench).
  setenv("FI_UNIVERSE_SIZE", "1024", /*overwrite=*/0);
}

absl::Status ValidateOptions(const DoctorOptions& o) {
  if (o.period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--doctor-period must be > 0");
  }
  if (o.peers.empty()) return absl::InvalidArgumentError("--doctor needs --doctor-peers");
  if (auto s = ParsePeerSpec(o.peers); !s.ok()) return s.status();
  if (auto a = ParseListenAddress(o.address); !a.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--doctor-address: ", a.status().message()));
  }
  if (o.sample < 0 || o.sample > 64) {
    return absl::InvalidArgumentError("doctor sample must be 0..64");
  }
  return absl::OkStatus();
}

std::vector<LocalDeviceSpec> DeviceSpecs(const NodeInventory& inventory, const DoctorOptions& o) {
  std::vector<LocalDeviceSpec> out;
  std::string bind;
  if (auto a = ParseListenAddress(o.address); a.ok() && a->host != "0.0.0.0" && a->host != "::") {
    bind = a->host;
  }
  for (const RdmaDevice& d : inventory.devices) {
    LocalDeviceSpec s;
    s.device = d.name;
    if (!o.provider.empty()) {
      s.provider = o.provider;
      // Only the device's own provider can be pinned to its domain; a
      // configured IP provider (tcp, for tests) binds to the control host.
      if (o.provider == "efa") s.domain = d.name + "-rdm";
      if (o.provider == "verbs" || o.provider == "verbs;ofi_rxm") s.domain = d.name;
      if (Core(o.provider) == "tcp" || Core(o.provider) == "sockets") s.node = bind;
    } else if (d.kind == DeviceKind::kEfa) {
      s.provider = "efa";
      s.domain = d.name + "-rdm";
    } else {
      s.provider = "verbs;ofi_rxm";
      s.domain = d.name;
    }
    out.push_back(std::move(s));
  }
  return out;
}

Doctor::Doctor(DoctorOptions options, std::vector<LocalDeviceSpec> devices)
    : options_(std::move(options)), specs_(std::move(devices)) {
  node_ = options_.node_name;
  if (node_.empty() && std::getenv("NODE_NAME") != nullptr) node_ = std::getenv("NODE_NAME");
  if (node_.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    node_ = host;
  }
  instance_ = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  probe_timeout_ = options_.probe_timeout > absl::ZeroDuration()
                       ? options_.probe_timeout
                       : std::min(options_.period / 2, absl::Seconds(2));
}

Doctor::~Doctor() { Stop(); }

absl::Status Doctor::Start() {
  if (auto s = ValidateOptions(options_); !s.ok()) return s;
  // Peers refuse a name that is not clean text; say so here, not in every query.
  if (auto s = CheckExternalName("doctor node name", node_, kMaxNameLength); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (set NODE_NAME or --doctor node name)"));
  }
  spec_ = *ParsePeerSpec(options_.peers);
  listen_ = *ParseListenAddress(options_.address);
  prober_ = std::make_unique<FabricProber>(specs_, options_.limits);
  if (auto s = prober_->Start(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("doctor: no probe endpoint: ", s.message()));
  }
  server_ =
      std::make_unique<ControlServer>([this] { return Self(); },
                                      [this](const std::string& source, const NodeInfo& asker) {
                                        std::vector<std::string> names;
                                        for (const DeviceEndpoint& d : asker.devices)
                                          names.push_back(d.name);
                                        prober_->AllowSenders(source, asker.node, names);
                                      });
  if (auto s = server_->Start(listen_); !s.ok()) return s;
  if (listen_.port == 0) listen_.port = server_->port();
  LogInfo(Component::kAgent,
          "doctor: node {} control on port {}, {} device(s), period {}, peers {}", node_,
          server_->port(), specs_.size(), absl::FormatDuration(options_.period), options_.peers);
  thread_ = std::thread([this] { RunRounds(); });
  return absl::OkStatus();
}

void Doctor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (server_) server_->Stop();
  if (prober_) prober_->Stop();
}

uint64_t Doctor::rounds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rounds_;
}

NodeInfo Doctor::Self() const { return NodeInfo{node_, instance_, prober_->names()}; }

void Doctor::RunRounds() {
  for (uint64_t t = 0;; ++t) {
    const absl::Time start = absl::Now();
    Round(t);
    std::unique_lock<std::mutex> lock(mu_);
    ++rounds_;
    const auto wait = absl::ToChronoNanoseconds(
        std::max(absl::ZeroDuration(), start + options_.period - absl::Now()));
    if (cv_.wait_for(lock, wait, [this] { return stop_; })) return;
  }
}

void Doctor::Query(const std::vector<PeerAddress>& nodes) {
  if (nodes.empty()) return;
  auto results = QueryAll(nodes, Self(), std::min(probe_timeout_, absl::Seconds(2)));
  std::lock_guard<std::mutex> lock(mu_);
  counters_["control_queries"] += nodes.size();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string key = nodes[i].ToString();
    NodeState& n = nodes_[key];
    const QueryResult& r = results[i];
    if (r.ok && r.info.instance == instance_) {
      self_addresses_.insert(key);
      continue;
    }
    n.control_ok = r.ok;
    if (r.ok) {
      n.info = r.info;
      n.last_info = absl::Now();
      n.control_error.clear();
      std::vector<std::string> names;
      for (const DeviceEndpoint& d : r.info.devices) names.push_back(d.name);
      prober_->AllowSenders(nodes[i].host, r.info.node, names);
    } else {
      n.control_error = r.error;
      n.control_reason = r.reason;
      failures_[r.reason]++;
    }
  }
}

void Doctor::Round(uint64_t t) {
  auto resolved = ResolvePeers(spec_, listen_.port);
  std::vector<PeerAddress> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (resolved.ok()) {
      last_peers_ = *resolved;
    } else {
      counters_["peer_list_errors"]++;
      LogWarn(Component::kAgent, "doctor: peers: {} (keeping the last list)",
              resolved.status().message());
    }
    all = last_peers_;
  }
  // One getifaddrs per round, outside mu_ (never per peer, never in Snapshot).
  const std::set<std::string> local =
      options_.local_addresses ? options_.local_addresses() : LocalAddresses();
  // The ring: every listed address, ours included (the same order everywhere).
  std::vector<PeerAddress> ring;
  int self = -1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const PeerAddress& a : all) {
      bool mine = self_addresses_.count(a.ToString()) > 0 ||
                  (a.port == listen_.port && local.count(a.host) > 0);
      if (mine && self >= 0) continue;  // the same node listed twice
      if (mine) self = static_cast<int>(ring.size());
      ring.push_back(a);
    }
  }
  if (self < 0) {
    PeerAddress me{listen_.host.empty() ? "0.0.0.0" : listen_.host, listen_.port};
    ring.push_back(me);
    std::sort(ring.begin(), ring.end());
    self = static_cast<int>(std::find(ring.begin(), ring.end(), me) - ring.begin());
  }
  const int n = static_cast<int>(ring.size());
  const int devices = static_cast<int>(specs_.size());
  struct Planned {
    size_t device;
    int node;
    int device_index;
    std::optional<std::string> peer_device;  // a re-probe: this device of the peer, by name
  };
  std::vector<Planned> plan;
  std::set<int> target_nodes;
  for (int d = 0; d < devices; ++d) {
    for (const ProbeTarget& tg : TargetsFor(n, self, d, devices, t, options_.sample)) {
      plan.push_back({static_cast<size_t>(d), tg.node, tg.device_index, std::nullopt});
      target_nodes.insert(tg.node);
    }
  }
  // Re-probes: every pair whose probe failed last round is probed again now,
  // before that failure is shown (strikes_).
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, int> ring_index;
    for (int i = 0; i < n; ++i) ring_index[ring[static_cast<size_t>(i)].ToString()] = i;
    for (const PairKey& key : reprobe_) {
      auto node = ring_index.find(std::get<1>(key));
      size_t d = 0;
      while (d < specs_.size() && specs_[d].device != std::get<0>(key)) ++d;
      if (node == ring_index.end() || node->second == self || d == specs_.size()) {
        strikes_.erase(key);  // no longer listed, or no such local device
        continue;
      }
      plan.push_back({d, node->second, static_cast<int>(d), std::get<2>(key)});
      target_nodes.insert(node->second);
    }
    reprobe_.clear();
  }
  // Phase 1: endpoint names of nodes we do not know, whose names are old, or
  // whose probes failed last time (a restart changes the names).
  std::vector<PeerAddress> ask;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const absl::Time now = absl::Now();
    for (int i : target_nodes) {
      const NodeState& s = nodes_[ring[static_cast<size_t>(i)].ToString()];
      if (!s.info || !s.control_ok || s.fabric_failed ||
          now - s.last_info > options_.period * options_.refresh_periods) {
        ask.push_back(ring[static_cast<size_t>(i)]);
      }
    }
  }
  Query(ask);
  std::set<std::string> asked;
  for (const PeerAddress& a : ask) asked.insert(a.ToString());

  // Phase 2: the fabric probes.
  struct Pending {
    PairKey key;
    PairStatus status;
    int probe = -1;  // index into requests; -1: not probed (why in status.last_error)
    std::string reason;
  };
  std::vector<Pending> pending;
  std::set<PairKey> planned_keys;
  std::vector<ProbeRequest> requests;
  const std::vector<LocalEndpoint> endpoints = prober_->endpoints();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Planned& p : plan) {
      const PeerAddress& addr = ring[static_cast<size_t>(p.node)];
      const std::string key = addr.ToString();
      if (self_addresses_.count(key)) continue;
      const NodeState& s = nodes_[key];
      const LocalEndpoint& local = endpoints[p.device];
      Pending pe;
      pe.status.peer_address = key;
      pe.status.local_device = specs_[p.device].device;
      pe.status.provider = local.provider;
      pe.status.control_reachable = s.control_ok;
      if (!s.info || s.info->devices.empty()) {
        pe.status.peer_node = s.info ? s.info->node : key;
        pe.reason = s.info ? "peer_has_no_device" : s.control_reason;
        if (s.info) pe.status.not_probed = pe.reason;
        pe.status.last_error =
            s.info ? "the peer reports no probe endpoint" : "control channel: " + s.control_error;
        pe.key = {pe.status.local_device, key, ""};
        if (planned_keys.insert(pe.key).second) pending.push_back(std::move(pe));
        continue;
      }
      const DeviceEndpoint* peer =
          &s.info->devices[static_cast<size_t>(p.device_index) % s.info->devices.size()];
      if (p.peer_device && !p.peer_device->empty()) {
        peer = nullptr;
        for (const DeviceEndpoint& d : s.info->devices) {
          if (d.device == *p.peer_device) peer = &d;
        }
        if (peer == nullptr) {  // the peer no longer has that device
          strikes_.erase({pe.status.local_device, key, *p.peer_device});
          continue;
        }
      }
      pe.status.peer_node = s.info->node;
      pe.status.peer_device = peer->device;
      pe.key = {pe.status.local_device, key, peer->device};
      if (!planned_keys.insert(pe.key).second) continue;  // planned and re-probed: once
      if (!local.error.empty()) {
        pe.reason = "endpoint_closed";
        pe.status.last_error = "local endpoint: " + local.error;
      } else if (Core(peer->provider) != Core(local.provider)) {
        pe.reason = "provider_mismatch";
        pe.status.last_error =
            absl::StrCat("provider mismatch: local ", local.provider, ", peer ", peer->provider);
      } else {
        pe.probe = static_cast<int>(requests.size());
        requests.push_back({p.device, peer->name});
      }
      if (pe.probe < 0) pe.status.not_probed = pe.reason;
      pending.push_back(std::move(pe));
    }
  }
  std::vector<ProbeResult> results = prober_->Probe(requests, probe_timeout_);

  // Phase 3: a failed probe to a node we did not ask this round: is its
  // control channel alive? That tells the two failure shapes apart.
  std::vector<PeerAddress> recheck;
  std::set<std::string> rechecked;
  for (const Pending& pe : pending) {
    if (pe.probe < 0 || results[static_cast<size_t>(pe.probe)].ok) continue;
    const std::string& key = std::get<1>(pe.key);
    if (asked.count(key) || rechecked.count(key)) continue;
    rechecked.insert(key);
    auto parsed = ParsePeerAddress(key);
    if (parsed.ok()) recheck.push_back(*parsed);
  }
  Query(recheck);

  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = absl::Now();
  std::set<std::string> failed_nodes;
  for (Pending& pe : pending) {
    const std::string& key = std::get<1>(pe.key);
    NodeState& s = nodes_[key];
    const ProbeResult* r = pe.probe >= 0 ? &results[static_cast<size_t>(pe.probe)] : nullptr;
    if (r != nullptr && !r->ok && r->reason == "bad_address") {
      // The peer's name does not fit our provider: not a network verdict.
      pe.reason = r->reason;
      pe.status.not_probed = r->reason;
      pe.status.last_error = absl::StrCat("bad peer address: ", r->error);
      pe.probe = -1;
      r = nullptr;
    }
    const bool failed = r == nullptr || !r->ok;
    if (r != nullptr && !r->ok) failures_[r->reason]++;
    if (r == nullptr && !pe.reason.empty() && std::get<2>(pe.key).size() > 0) {
      failures_[pe.reason]++;
    }
    if (r == nullptr && pe.reason == "peer_has_no_device") failures_[pe.reason]++;
    if (failed) failed_nodes.insert(key);
    // A failure is shown only when the pair's re-probe in the next round
    // fails too: never a verdict from one probe (a first contact can time out
    // while the provider still sets its connection up).
    if (failed && ++strikes_[pe.key] < 2) {
      reprobe_.insert(pe.key);
      counters_["reprobes"]++;
      continue;
    }
    if (!failed) strikes_.erase(pe.key);
    PairStatus& st = pairs_[pe.key];
    const double prev_success = st.last_success_unix;
    const double prev_rtt = st.rtt_seconds;
    st = pe.status;
    st.control_reachable = s.control_ok;
    st.last_success_unix = prev_success;
    st.rtt_seconds = prev_rtt;
    st.last_probe_unix = Unix(now);
    if (r != nullptr) {
      st.reachable = r->ok;
      if (r->ok) {
        st.rtt_seconds = r->rtt_seconds;
        st.last_success_unix = Unix(now);
        st.last_error.clear();
        rtt_[{st.local_device, st.provider}].Observe(r->rtt_seconds);
      } else {
        st.last_error = absl::StrCat(r->reason, ": ", r->error);
      }
    } else {
      st.reachable = false;
    }
    // A node that answers now replaces its placeholder pair.
    if (!std::get<2>(pe.key).empty()) {
      pairs_.erase({std::get<0>(pe.key), key, ""});
      strikes_.erase({std::get<0>(pe.key), key, ""});
    }
  }
  for (auto& [key, s] : nodes_) s.fabric_failed = failed_nodes.count(key) > 0;
  // Node-level facts reach every pair of the node, not only those probed this
  // round: whether its control channel answered, and "down" (control silent
  // and every fabric probe failed, in two rounds running) which no stale
  // success hides.
  std::set<std::string> probed_ok;
  for (const Pending& pe : pending) {
    if (pe.probe >= 0 && results[static_cast<size_t>(pe.probe)].ok) {
      probed_ok.insert(std::get<1>(pe.key));
    }
  }
  std::set<std::string> queried = asked;
  queried.insert(rechecked.begin(), rechecked.end());
  for (const std::string& addr : queried) {
    NodeState& s = nodes_[addr];
    const bool down = !s.control_ok && failed_nodes.count(addr) && !probed_ok.count(addr);
    s.down_rounds = down ? s.down_rounds + 1 : 0;
  }
  for (auto& [key, st] : pairs_) {
    const std::string& addr = std::get<1>(key);
    if (!queried.count(addr)) continue;
    const NodeState& s = nodes_[addr];
    st.control_reachable = s.control_ok;
    if (s.down_rounds >= 2 && st.reachable) {
      st.reachable = false;
      st.last_error = "peer down: its control channel and every probe failed, two rounds running";
    }
  }
  // Forget pairs of nodes no longer listed, and pairs not probed for long.
  std::set<std::string> listed;
  for (const PeerAddress& a : all) listed.insert(a.ToString());
  // A pair stays listed for two node-coverage cycles (every node pair is
  // probed within ceil(ceil(M/D)/K) periods), at least 10 periods; that
  // bounds the series per node to about D*(K+1)*retention (docs/doctor.md).
  const int m = std::max(1, n - 1);
  const int per_device = (m + std::max(1, devices) - 1) / std::max(1, devices);
  const int cycle = (per_device + std::max(1, options_.sample) - 1) / std::max(1, options_.sample);
  const double horizon =
      Unix(now) - absl::ToDoubleSeconds(options_.period) * std::max(10, 2 * cycle);
  for (auto it = pairs_.begin(); it != pairs_.end();) {
    const std::string& key = std::get<1>(it->first);
    if (!listed.count(key) || self_addresses_.count(key) || it->second.last_probe_unix < horizon) {
      it = pairs_.erase(it);
    } else {
      ++it;
    }
  }
  // Strikes are kept for pairs awaiting their re-probe and for shown pairs
  // (a shown failing pair's next failure shows at once).
  for (auto it = strikes_.begin(); it != strikes_.end();) {
    const bool keep = listed.count(std::get<1>(it->first)) &&
                      (reprobe_.count(it->first) || pairs_.count(it->first));
    it = keep ? std::next(it) : strikes_.erase(it);
  }
  // Hard cap: the least recently probed go first.
  if (pairs_.size() > options_.max_pairs) {
    std::vector<std::pair<double, PairKey>> age;
    for (const auto& [k, p] : pairs_) age.push_back({p.last_probe_unix, k});
    std::sort(age.begin(), age.end());
    for (size_t i = 0; i < age.size() - options_.max_pairs; ++i) pairs_.erase(age[i].second);
  }
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    it = listed.count(it->first) ? std::next(it) : nodes_.erase(it);
  }
  counters_["rounds"]++;
  counters_["peers"] = static_cast<uint64_t>(n - 1);
  peer_count_ = static_cast<size_t>(n - 1);
}

Report Doctor::Snapshot() const {
  Report r;
  r.node = node_;
  r.period_seconds = absl::ToDoubleSeconds(options_.period);
  r.now_unix = Unix(absl::Now());
  if (prober_) {
    r.endpoints = prober_->endpoints();
    r.counters = prober_->counters();
  }
  if (server_) {
    for (auto& [k, v] : server_->counters()) r.counters[k] += v;
  }
  std::lock_guard<std::mutex> lock(mu_);
  r.peers = peer_count_;  // of the last round: no getifaddrs here, and none under mu_
  for (const auto& [k, p] : pairs_) r.pairs.push_back(p);
  r.rtt = rtt_;
  r.failures = failures_;
  for (const auto& [k, v] : counters_) {
    if (k != "peers") r.counters[k] += v;
  }
  return r;
}

std::string Doctor::MetricsText() const { return RenderMetrics(Snapshot()); }

std::string Doctor::PeersJson() const { return DumpJson(RenderPeersJson(Snapshot()), 2) + "\n"; }

}  // namespace fabric::doctor
