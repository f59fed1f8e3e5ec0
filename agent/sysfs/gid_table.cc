#include "agent/sysfs/gid_table.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/file_util.h"
#include "agent/base/utf8.h"

namespace fabric::gid {
namespace {

constexpr size_t kMaxNetdevName = 15;  // IFNAMSIZ without the NUL

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// A slot index from a file name under gids/: digits only.
std::optional<int> SlotIndex(const std::string& name) {
  if (name.empty() || name.size() > 6) return std::nullopt;
  int v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

}  // namespace

absl::StatusOr<GidBytes> ParseGid(absl::string_view text) {
  GidBytes out{};
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a GID as eight 4-digit hex groups, got ", QuoteContent(text)));
  };
  // 8 groups x 4 digits + 7 colons.
  if (text.size() != 39) return bad();
  for (int g = 0; g < 8; ++g) {
    const size_t at = static_cast<size_t>(g) * 5;
    if (g > 0 && text[at - 1] != ':') return bad();
    int value = 0;
    for (size_t i = at; i < at + 4; ++i) {
      const int d = HexDigit(text[i]);
      if (d < 0) return bad();
      value = value * 16 + d;
    }
    out[2 * g] = static_cast<uint8_t>(value >> 8);
    out[2 * g + 1] = static_cast<uint8_t>(value & 0xff);
  }
  return out;
}

bool IsZero(const GidBytes& gid) {
  return std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; });
}

bool IsIpv4Mapped(const GidBytes& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[10] == 0xff && gid[11] == 0xff;
}

std::string Ipv4Text(const GidBytes& gid) {
  if (!IsIpv4Mapped(gid)) return "";
  return absl::StrCat(gid[12], ".", gid[13], ".", gid[14], ".", gid[15]);
}

GidType ParseGidType(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (text == "IB/RoCE v1") return GidType::kIbRoceV1;
  if (text == "RoCE v2") return GidType::kRoceV2;
  return GidType::kOther;
}

int ScanLimit(const std::vector<GidEntry>& entries) {
  int highest = -1;
  for (const GidEntry& e : entries) highest = std::max(highest, e.index);
  return highest + 2;
}

absl::StatusOr<std::vector<GidEntry>> ReadGidTable(const SysfsLayout& layout,
                                                   const std::string& ibdev, int port,
                                                   GidScan scan) {
  const std::string gids = layout.PortGidsDir(ibdev, port);
  std::vector<int> slots;
  if (scan.limit) {
    // No listing (a 1024-slot directory on rxe): slots past the table's end
    // read ENOENT and are skipped below.
    if (!IsDirectory(gids)) return absl::NotFoundError(absl::StrCat(gids, ": no such directory"));
    for (int i = 0; i < *scan.limit; ++i) slots.push_back(i);
  } else {
    auto names = ListDirFast(gids);
    if (!names.ok()) return names.status();
    for (const std::string& n : *names) {
      if (std::optional<int> i = SlotIndex(n)) slots.push_back(*i);
    }
    std::sort(slots.begin(), slots.end());
  }
  auto known = [&](int index, const std::string& text) -> const GidEntry* {
    if (scan.previous == nullptr) return nullptr;
    for (const GidEntry& e : *scan.previous) {
      if (e.index == index && e.gid == text) return &e;
    }
    return nullptr;
  };
  const std::string types = layout.PortGidTypesDir(ibdev, port);
  const std::string ndevs = layout.PortGidNdevsDir(ibdev, port);
  std::vector<GidEntry> out;
  for (int i : slots) {
    const std::string path = absl::StrCat(gids, "/", i);
    auto text = ReadTrimmed(path);
    if (!text.ok()) {
      if (IsTransientReadError(text.status())) return text.status();
      continue;  // the table shrank under us (device going away)
    }
    auto bytes = ParseGid(*text);
    if (!bytes.ok())
      return absl::InvalidArgumentError(absl::StrCat(path, ": ", bytes.status().message()));
    if (IsZero(*bytes)) continue;  // an empty slot
    const std::string lower = absl::AsciiStrToLower(*text);
    if (const GidEntry* same = known(i, lower)) {
      out.push_back(*same);
      continue;
    }
    auto type = ReadTrimmed(absl::StrCat(types, "/", i));
    if (!type.ok()) {
      if (IsTransientReadError(type.status())) return type.status();
      continue;  // emptied between the two reads
    }
    GidEntry e;
    e.index = i;
    e.gid = lower;
    e.type = ParseGidType(*type);
    // EINVAL: an entry without a netdev (InfiniBand, EFA).
    auto ndev = ReadTrimmed(absl::StrCat(ndevs, "/", i));
    if (ndev.ok()) {
      // Descriptive only (the grant is the uverbs node): a name that is not
      // one is dropped, not trusted into logs and JSON.
      if (CheckExternalName("netdev name", *ndev, kMaxNetdevName).ok()) e.netdev = *ndev;
    } else if (IsTransientReadError(ndev.status())) {
      return ndev.status();
    }
    out.push_back(std::move(e));
  }
  return out;
}

RoceV2Ipv4 FindRoceV2Ipv4(const PortInfo& port, bool efa,
                          const std::vector<std::string>& own_netdevs) {
  RoceV2Ipv4 r;
  std::vector<std::string> own = own_netdevs;
  if (own.empty()) {
    for (const GidEntry& e : port.gids) {
      if (e.index == 0 && !e.netdev.empty()) own.push_back(e.netdev);
    }
  }
  auto is_own = [&](const std::string& netdev) {
    // No netdev known for the port: every entry is its own, as far as can be told.
    return own.empty() || std::find(own.begin(), own.end(), netdev) != own.end();
  };
  std::vector<std::string> mine,
      upper;  // "index 3 (10.0.2.15)", "index 2 (10.0.100.5 on eth0.100)"
  for (const GidEntry& e : port.gids) {
    if (e.type != GidType::kRoceV2) continue;
    auto bytes = ParseGid(e.gid);
    if (!bytes.ok() || !IsIpv4Mapped(*bytes)) continue;
    if (!is_own(e.netdev)) {
      ++r.on_upper;
      upper.push_back(absl::StrCat("index ", e.index, " (", Ipv4Text(*bytes), " on ",
                                   e.netdev.empty() ? "no netdev" : e.netdev, ")"));
      continue;
    }
    mine.push_back(absl::StrCat("index ", e.index, " (", Ipv4Text(*bytes), ")"));
    if (++r.candidates > 1) continue;
    r.index = e.index;
    r.gid = e.gid;
    r.ipv4 = Ipv4Text(*bytes);
    r.netdev = e.netdev;
  }
  const std::string own_text = own.empty() ? "the port's netdev" : absl::StrJoin(own, "/");
  if (r.candidates > 1) {
    r.index.reset();
    r.gid.clear();
    r.ipv4.clear();
    r.netdev.clear();
    r.reason = absl::StrCat(
        own_text, " has ", r.candidates, " RoCE v2 IPv4 GIDs (", absl::StrJoin(mine, ", "),
        "): a second address or a floating VIP, and which one the peers reach cannot be told "
        "here; set the index in the Pod spec");
    return r;
  }
  if (r.index) return r;
  if (!port.gid_error.empty()) {
    r.reason = absl::StrCat("GID table not readable: ", port.gid_error);
  } else if (efa) {
    r.reason = "EFA: no RoCE, the GID index does not apply";
  } else if (port.link_layer == "InfiniBand") {
    r.reason = "InfiniBand port: no RoCE GIDs, the GID index does not apply";
  } else if (port.link_layer != "Ethernet") {
    r.reason = absl::StrCat("link layer '", port.link_layer, "': no RoCE GIDs");
  } else if (r.on_upper > 0) {
    r.reason = absl::StrCat("no RoCE v2 IPv4 GID on ", own_text,
                            "; only on devices on top of it (VLAN, macvlan or "
                            "bond): ",
                            absl::StrJoin(upper, ", "),
                            ", whose addresses the peers may not reach; set "
                            "the index in the Pod spec to use one");
  } else {
    bool v2 = false;
    for (const GidEntry& e : port.gids) v2 = v2 || e.type == GidType::kRoceV2;
    r.reason = v2 ? "no RoCE v2 GID with an IPv4 address (give the netdev an IPv4 address)"
                  : "no RoCE v2 GID in the table";
  }
  return r;
}

}  // namespace fabric::gid
