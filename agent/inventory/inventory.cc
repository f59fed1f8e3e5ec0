#include "agent/inventory/inventory.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "agent/base/file_util.h"
#include "agent/base/json_text.h"
#include "agent/base/logging.h"
#include "agent/base/mono_clock.h"
#include "agent/base/utf8.h"
#include "agent/sysfs/gid_table.h"
#include "agent/sysfs/sysfs_discovery.h"
#include "nlohmann/json.hpp"

namespace fabric {
namespace {

using nlohmann::json;

json ToJson(const RdmaDevice& d) {
  json j = {
      {"name", d.name},
      {"kind", std::string(DeviceKindName(d.kind))},
      {"node_type", d.node_type},
      {"node_guid", d.node_guid},
      {"uverbs",
       {{"rel_path", d.uverbs.rel_path}, {"major", d.uverbs.major}, {"minor", d.uverbs.minor}}},
      {"netdevs", d.netdevs}};
  if (d.pci) {
    j["pci"] = {{"address", d.pci->address},
                {"vendor", d.pci->vendor},
                {"device", d.pci->device},
                {"driver", d.pci->driver},
                {"numa_node", d.pci->numa_node},
                {"physfn", d.pci->physfn},
                {"sriov_numvfs", d.pci->sriov_numvfs}};
  }
  json ports = json::array();
  for (const PortInfo& p : d.ports) {
    ports.push_back({{"number", p.number},
                     {"state_code", p.state_code},
                     {"state", p.state},
                     {"phys_state_code", p.phys_state_code},
                     {"phys_state", p.phys_state},
                     {"link_layer", p.link_layer},
                     {"rate", p.rate},
                     {"netdev", p.netdev}});
  }
  j["ports"] = ports;
  return j;
}

RdmaDevice FromJson(const json& j) {
  RdmaDevice d;
  d.name = j.at("name").get<std::string>();
  d.kind = j.at("kind").get<std::string>() == "efa" ? DeviceKind::kEfa : DeviceKind::kRdma;
  d.node_type = j.value("node_type", "");
  d.node_guid = j.value("node_guid", "");
  const json& u = j.at("uverbs");
  d.uverbs = CharDevice{u.at("rel_path").get<std::string>(), u.at("major").get<uint32_t>(),
                        u.at("minor").get<uint32_t>()};
  d.netdevs = j.value("netdevs", std::vector<std::string>());
  if (j.contains("pci")) {
    const json& p = j["pci"];
    PciInfo pci;
    pci.address = p.at("address").get<std::string>();
    pci.vendor = p.at("vendor").get<uint32_t>();
    pci.device = p.at("device").get<uint32_t>();
    pci.driver = p.value("driver", "");
    pci.numa_node = p.value("numa_node", -1);
    pci.physfn = p.value("physfn", "");
    pci.sriov_numvfs = p.value("sriov_numvfs", 0);
    d.pci = pci;
  }
  for (const json& p : j.value("ports", json::array())) {
    PortInfo port;
    port.number = p.at("number").get<int>();
    port.state_code = p.value("state_code", 0);
    port.state = p.value("state", "");
    port.phys_state_code = p.value("phys_state_code", 0);
    port.phys_state = p.value("phys_state", "");
    port.link_layer = p.value("link_layer", "");
    port.rate = p.value("rate", "");
    port.netdev = p.value("netdev", "");
    d.ports.push_back(port);
  }
  return d;
}

std::string DescribeGidChoice(const gid::RoceV2Ipv4& c) {
  if (!c.index) return absl::StrCat("none (", c.reason, ")");
  return absl::StrCat("index ", *c.index, " (", c.ipv4, c.netdev.empty() ? "" : " on ", c.netdev,
                      ")");
}

bool SameDevices(const NodeInventory& a, const NodeInventory& b) {
  auto same_name = [](const RdmaDevice& x, const RdmaDevice& y) {
    if (x.name != y.name || x.ports.size() != y.ports.size()) return false;
    for (size_t i = 0; i < x.ports.size(); ++i) {
      if (x.ports[i].gids != y.ports[i].gids) return false;  // a new GID is news too
    }
    return true;
  };
  return std::equal(a.devices.begin(), a.devices.end(), b.devices.begin(), b.devices.end(),
                    same_name) &&
         a.in_pod_netns == b.in_pod_netns;
}

}  // namespace

Inventory::Inventory(HostPaths paths, InventoryOptions options, const AttachmentSource* attachments)
    : paths_(std::move(paths)),
      layout_(paths_),
      options_(std::move(options)),
      attachments_(attachments),
      backoff_(options_.retry_initial) {
  std::lock_guard<std::mutex> lock(mu_);
  LoadState();
}

Inventory::~Inventory() { Stop(); }

absl::StatusOr<std::vector<std::string>> Inventory::Listing() const {
  // Names in the two class directories: a change means hot-plug (add, remove,
  // driver bind/unbind, a netns move), which is when a walk is worth its cost.
  std::vector<std::string> out;
  for (const std::string& dir : {layout_.InfinibandClassDir(), layout_.VerbsClassDir()}) {
    auto names = ListDirFast(dir);
    if (names.ok()) {
      out.insert(out.end(), names->begin(), names->end());
    } else if (!absl::IsNotFound(names.status())) {
      return names.status();
    }
    out.push_back("|");
  }
  return out;
}

absl::StatusOr<NodeInventory> Inventory::Build(bool strict) {
  auto inv = options_.walk ? options_.walk(paths_) : DiscoverNode(paths_);
  if (!inv.ok()) return inv.status();
  std::map<std::string, std::string> moved;
  if (attachments_ != nullptr) {
    auto m = attachments_->MovedDevices();
    if (!m.ok()) {
      if (strict) return m.status();
      LogWarn(Component::kDiscovery, "cannot read the CNI attachment records: {}",
              m.status().message());
    } else {
      moved = std::move(*m);
    }
  }
  for (const auto& [name, pod] : moved) {
    if (inv->Find(name) != nullptr) continue;  // in the host netns: listed as found
    std::optional<RdmaDevice> dev;
    if (const RdmaDevice* last = current_.Find(name); last != nullptr) {
      dev = *last;
    } else if (auto k = known_.find(name); k != known_.end()) {
      dev = k->second;
    }
    // The verbs node stays visible from the host (not netns-tagged); the move
    // re-registers the device, so its number is taken from there when it can.
    if (auto seen = DescribeFromVerbsNode(paths_, name); seen.ok()) {
      if (dev) {
        dev->uverbs = seen->uverbs;
      } else {
        dev = *seen;  // never listed by this agent (state lost): what the host still sees
      }
    }
    if (!dev) {
      std::string line = absl::StrCat("device ", name, " is in the netns of Pod ", pod,
                                      " but nothing describes it; not listed");
      LogWarn(Component::kDiscovery, "{}", line);
      inv->warnings.push_back(std::move(line));
      inv->skipped.push_back(name);
      continue;
    }
    inv->devices.push_back(std::move(*dev));
    inv->in_pod_netns[name] = pod;
  }
  std::sort(inv->devices.begin(), inv->devices.end(),
            [](const RdmaDevice& a, const RdmaDevice& b) { return NaturalLess(a.name, b.name); });
  return inv;
}

void Inventory::Accept(NodeInventory inv) {
  for (const auto& [name, pod] : inv.in_pod_netns) {
    if (!current_.in_pod_netns.count(name)) {
      LogInfo(Component::kDiscovery,
              "{} is in the netns of Pod {}: kept listed and allocated, health held", name, pod);
    }
  }
  current_ = std::move(inv);
  // Only what is listed now needs remembering: a device that left and comes
  // back is walked afresh. Keeps memory flat under devices that come and go.
  known_.clear();
  for (const RdmaDevice& d : current_.devices) known_[d.name] = d;
  SaveState();
}

void Inventory::NoteSkips(const NodeInventory& inv, absl::Time now) {
  if (inv.skipped.empty()) {
    skipping_ = false;
    skip_backoff_ = absl::ZeroDuration();
    retry_at_ = absl::InfinitePast();
    return;
  }
  skipping_ = true;
  skip_backoff_ = std::clamp(skip_backoff_ * 2, options_.skip_retry_initial,
                             std::max(options_.skip_retry_initial, options_.skip_retry_max));
  retry_at_ = now + skip_backoff_;
}

absl::StatusOr<NodeInventory> Inventory::Discover() {
  std::lock_guard<std::mutex> lock(mu_);
  auto listing = Listing();
  auto inv = Build(/*strict=*/false);
  if (!inv.ok()) return inv.status();
  // An unreadable listing now only means the first poll walks again.
  listing_ = listing.ok() ? *listing : std::vector<std::string>{"?"};
  NoteSkips(*inv, absl::InfinitePast());  // a skip is looked at again at the first poll
  Accept(*inv);
  return current_;
}

bool Inventory::Poll(absl::Time now) {
  NodeInventory published;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failing_ && now < retry_at_) return false;
    auto listing = Listing();
    const bool listing_changed = !listing.ok() || *listing != listing_;
    const bool skip_retry = !failing_ && !listing_changed && skipping_;
    if (!failing_ && !listing_changed && !(skipping_ && now >= retry_at_)) {
      if (!RefreshGidsLocked(now)) return false;
      published = current_;
    } else if (!RediscoverLocked(listing, skip_retry, now)) {
      return false;
    } else {
      published = current_;
    }
  }
  if (publish_) publish_(published);
  return true;
}

bool Inventory::RediscoverLocked(const absl::StatusOr<std::vector<std::string>>& listing,
                                 bool skip_retry, absl::Time now) {
  absl::StatusOr<NodeInventory> inv =
      listing.ok() ? Build(/*strict=*/true) : absl::StatusOr<NodeInventory>(listing.status());
  if (!inv.ok()) {
    // An error is not "no devices": keep the last good list, retry later.
    failing_ = true;
    ++failed_attempts_;
    retry_at_ = now + backoff_;
    LogWarn(Component::kDiscovery,
            "rediscovery failed (attempt {}), keeping the last {} device(s), retry in {}: {}",
            failed_attempts_, current_.devices.size(), absl::FormatDuration(backoff_),
            inv.status().message());
    backoff_ = std::min(backoff_ * 2, options_.retry_max);
    return false;
  }
  if (failing_) {
    LogInfo(Component::kDiscovery, "rediscovery succeeded after {} failed attempt(s)",
            failed_attempts_);
  }
  failing_ = false;
  backoff_ = options_.retry_initial;
  listing_ = *listing;
  // A device skipped for a file it could not read or parse (garbage for a
  // moment, mid hot-plug) would otherwise stay unlisted until some other
  // device changes the listing: look again, with a bounded backoff.
  NoteSkips(*inv, now);
  // A retry that finds the same devices is not worth publishing.
  const bool same = skip_retry && SameDevices(*inv, current_);
  Accept(*std::move(inv));
  gid_full_at_ = now;  // the walk read every table
  return !same;
}

bool Inventory::RefreshGidsLocked(absl::Time now) {
  const bool full = now - gid_full_at_ >= options_.gid_full_scan;
  if (full) gid_full_at_ = now;
  bool changed = false;
  for (RdmaDevice& dev : current_.devices) {
    if (current_.in_pod_netns.count(dev.name)) continue;  // not in this view
    for (PortInfo& port : dev.ports) {
      // Only RoCE tables follow the netdev's addresses; IB and EFA GIDs are
      // the port's own and need no polling (a walk reads them).
      if (port.link_layer != "Ethernet" || dev.kind == DeviceKind::kEfa) continue;
      gid::GidScan scan;
      if (!full) {
        scan.limit = gid::ScanLimit(port.gids);
        scan.previous = &port.gids;
      }
      auto read = gid::ReadGidTable(layout_, dev.name, port.number, scan);
      // A bounded read is the whole table too: the slots past the limit were
      // empty at the last read, and a new entry takes the lowest free slot.
      std::vector<GidEntry> gids = port.gids;
      std::string error;
      if (read.ok()) {
        gids = *std::move(read);
      } else if (IsTransientReadError(read.status()) || absl::IsNotFound(read.status())) {
        continue;  // next poll; a vanished device shows in the listing
      } else {
        error = std::string(read.status().message());
      }
      if (gids == port.gids && error == port.gid_error) continue;
      const gid::RoceV2Ipv4 before =
          gid::FindRoceV2Ipv4(port, dev.kind == DeviceKind::kEfa, dev.netdevs);
      port.gids = std::move(gids);
      port.gid_error = std::move(error);
      const gid::RoceV2Ipv4 after =
          gid::FindRoceV2Ipv4(port, dev.kind == DeviceKind::kEfa, dev.netdevs);
      if (before.index != after.index || before.ipv4 != after.ipv4) {
        LogInfo(Component::kDiscovery, "{} port {}: RoCE v2 IPv4 GID {} -> {}", dev.name,
                port.number, DescribeGidChoice(before), DescribeGidChoice(after));
      }
      changed = true;
    }
  }
  if (changed) {
    for (const RdmaDevice& d : current_.devices) known_[d.name] = d;
  }
  return changed;
}

void Inventory::Start(absl::Duration interval, Publish publish) {
  publish_ = std::move(publish);
  thread_ = std::thread([this, interval] {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (stop_cv_.wait_for(lock, absl::ToChronoMilliseconds(interval),
                              [this] { return stop_; })) {
          return;
        }
      }
      Poll(MonotonicNow());
    }
  });
}

void Inventory::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

NodeInventory Inventory::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

bool Inventory::retrying() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failing_;
}

uint64_t Inventory::failed_attempts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_attempts_;
}

void Inventory::LoadState() {
  if (options_.state_file.empty()) return;
  auto text = ReadFile(options_.state_file);
  if (!text.ok()) return;  // first start
  try {
    json j = json::parse(*text);
    for (const json& d : j.at("devices")) {
      RdmaDevice dev = FromJson(d);
      // The file is ours, but it is read back as text from outside: a name
      // discovery would refuse is not taken from it either.
      if (absl::Status s = CheckExternalName("device name", dev.name, 63); !s.ok()) {
        LogWarn(Component::kDiscovery, "{}: ignoring a device: {}", options_.state_file,
                s.message());
        continue;
      }
      known_[dev.name] = std::move(dev);
    }
    saved_ = *text;
  } catch (const std::exception& e) {
    LogWarn(Component::kDiscovery, "ignoring {}: {}", options_.state_file, e.what());
  }
}

void Inventory::SaveState() {
  if (options_.state_file.empty()) return;
  json devices = json::array();
  for (const RdmaDevice& d : current_.devices) devices.push_back(ToJson(d));
  std::string text = DumpJson(json{{"devices", devices}}, 1) + "\n";
  if (text == saved_) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(options_.state_file).parent_path(), ec);
  if (absl::Status s = WriteFileAtomic(options_.state_file, text, 0600); !s.ok()) {
    LogWarn(Component::kDiscovery, "device descriptions not saved: {}", s.message());
    return;
  }
  saved_ = std::move(text);
}

}  // namespace fabric
