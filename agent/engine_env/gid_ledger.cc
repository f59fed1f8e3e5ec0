#include "agent/engine_env/gid_ledger.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/mono_clock.h"
#include "agent/sysfs/gid_table.h"

namespace fabric::engine_env {
namespace {

// A shared device keeps at most this many distinct values per port: enough
// for every address change a node goes through while its Pods live.
constexpr size_t kMaxValuesPerPort = 8;

// "10.0.2.16 on eth0", or the GID itself when it is not an IPv4 one.
std::string EntryText(const GidEntry& e) {
  auto bytes = gid::ParseGid(e.gid);
  std::string text = bytes.ok() && gid::IsIpv4Mapped(*bytes) ? gid::Ipv4Text(*bytes) : e.gid;
  if (!e.netdev.empty()) absl::StrAppend(&text, " on ", e.netdev);
  return text;
}

}  // namespace

std::string GivenText(const GivenGid& g) {
  std::string vars = g.variables.empty() ? "GID index" : absl::StrJoin(g.variables, "/");
  return absl::StrCat(vars, "=", g.index, " (", g.ipv4.empty() ? g.gid : g.ipv4,
                      g.netdev.empty() ? "" : " on ", g.netdev, ")");
}

std::string WhyGone(const GivenGid& g, const RdmaDevice* live) {
  if (live == nullptr) return "";
  const PortInfo* port = nullptr;
  for (const PortInfo& p : live->ports) {
    if (p.number == g.port) port = &p;
  }
  // Gone, or a table that cannot be read: nothing to compare with.
  if (port == nullptr || !port->gid_error.empty()) return "";
  const GidEntry* at = nullptr;
  const GidEntry* moved = nullptr;
  for (const GidEntry& e : port->gids) {
    if (e.index == g.index) at = &e;
    if (e.gid == g.gid && e.type == GidType::kRoceV2 &&
        (moved == nullptr || e.index < moved->index)) {
      moved = &e;
    }
  }
  if (at != nullptr && at->gid == g.gid) return "";
  std::string now = at != nullptr ? absl::StrCat("index ", g.index, " now holds ", EntryText(*at))
                                  : absl::StrCat("index ", g.index, " is empty now");
  const std::string what = g.ipv4.empty() ? g.gid : g.ipv4;
  if (moved != nullptr) {
    absl::StrAppend(&now, ", and ", what, " is at index ", moved->index);
  } else {
    absl::StrAppend(&now, ", and ", what, " has left ", g.device, " port ", g.port, "'s table");
  }
  return absl::StrCat(GivenText(g), ", given at Allocate, no longer names its GID: ", now);
}

GidLedger::GidLedger(Clock mono, Clock wall)
    : mono_(mono ? std::move(mono) : Clock([] { return MonotonicNow(); })),
      wall_(wall ? std::move(wall) : Clock([] { return absl::Now(); })) {}

void GidLedger::Record(const std::vector<GivenGid>& given, bool exclusive) {
  if (given.empty()) return;
  const absl::Time mono = mono_(), wall = wall_();
  std::lock_guard<std::mutex> lock(mu_);
  if (exclusive) {
    // The device's one holder is this grant's container from now on.
    std::set<std::string> devices;
    for (const GivenGid& g : given) devices.insert(g.device);
    given_.erase(std::remove_if(given_.begin(), given_.end(),
                                [&](const GivenGid& g) { return devices.count(g.device) > 0; }),
                 given_.end());
  }
  for (GivenGid g : given) {
    g.given_at = wall;
    g.given_mono = mono;
    auto same = std::find_if(given_.begin(), given_.end(),
                             [&](const GivenGid& k) { return k.SameValue(g); });
    if (same != given_.end()) {
      for (const std::string& v : g.variables) {
        if (std::find(same->variables.begin(), same->variables.end(), v) == same->variables.end()) {
          same->variables.push_back(v);
        }
      }
      same->given_at = wall;
      same->given_mono = mono;
      continue;
    }
    given_.push_back(std::move(g));
    // Bounded per port: the oldest value goes first.
    const GivenGid& added = given_.back();
    std::vector<size_t> port_values;
    for (size_t i = 0; i < given_.size(); ++i) {
      if (given_[i].device == added.device && given_[i].port == added.port) {
        port_values.push_back(i);
      }
    }
    if (port_values.size() > kMaxValuesPerPort) {
      size_t oldest = port_values.front();
      for (size_t i : port_values) {
        if (given_[i].given_mono < given_[oldest].given_mono) oldest = i;
      }
      given_.erase(given_.begin() + static_cast<std::ptrdiff_t>(oldest));
    }
  }
}

std::vector<GivenGid> GidLedger::Current(const std::set<std::string>& held, absl::Duration settle) {
  const absl::Time mono = mono_();
  std::lock_guard<std::mutex> lock(mu_);
  given_.erase(std::remove_if(given_.begin(), given_.end(),
                              [&](const GivenGid& g) {
                                return held.count(g.device) == 0 && mono - g.given_mono > settle;
                              }),
               given_.end());
  return given_;
}

std::optional<GivenGid> HolderValue(const std::vector<GivenGid>& current, const std::string& device,
                                    int port) {
  std::optional<GivenGid> found;
  for (const GivenGid& g : current) {
    if (g.device != device || g.port != port) continue;
    if (found) return std::nullopt;  // several values: whose is whose cannot be told
    found = g;
  }
  return found;
}

std::string HolderGidGone(const std::vector<GivenGid>& current, const RdmaDevice& live) {
  std::vector<std::string> gone;
  for (const PortInfo& p : live.ports) {
    if (std::optional<GivenGid> g = HolderValue(current, live.name, p.number)) {
      if (std::string why = WhyGone(*g, &live); !why.empty()) gone.push_back(std::move(why));
    }
  }
  return absl::StrJoin(gone, "; ");
}

}  // namespace fabric::engine_env
