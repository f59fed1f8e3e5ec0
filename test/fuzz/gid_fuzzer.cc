// The GID table reader (agent/sysfs/gid_table): ParseGid, ParseGidType and ReadGidTable
// over a fake port whose gids/, gid_attrs/types/ and gid_attrs/ndevs/ files
// hold the fuzzed contents (a driver bug or a bind-mounted fake must not take
// the agent down), then FindRoceV2Ipv4 over what was read.
// Input: consumed by FuzzedDataProvider as one GID text, then up to 8 slots,
// each a GID text, a type text and a netdev text (absent files too).
// Invariants:
//  - ParseGid accepts exactly eight groups of four hex digits joined by ':'
//    (39 bytes), and what it accepts prints back (lowercase) to the same bytes;
//  - ReadGidTable either succeeds or fails with kInvalidArgument (content) —
//    never another error on a readable tree; its entries are in index order,
//    none is the zero GID, each GID parses, each netdev is a usable name;
//  - a bounded read (GidScan::limit) returns exactly the full read's entries
//    below the limit;
//  - FindRoceV2Ipv4 (the port's own netdev: "eth0") counts the RoCE v2
//    IPv4-mapped entries on eth0 as candidates and the others as on_upper,
//    sets the index exactly when there is one candidate, to that entry's,
//    and otherwise says why.
#include <fcntl.h>
#include <ftw.h>
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/base/file_util.h"
#include "agent/base/utf8.h"
#include "agent/sysfs/gid_table.h"
#include "agent/sysfs/sysfs_layout.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::GidEntry;
using fabric::GidType;
using fabric::SysfsLayout;
namespace gid = fabric::gid;

constexpr int kSlots = 8;

std::string g_root;

void RemoveTree() {
  ::nftw(
      g_root.c_str(),
      [](const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }, 16,
      FTW_DEPTH | FTW_PHYS);
}

void Write(const std::string& path, const std::string& content) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  ::close(fd);
}

const SysfsLayout& Layout() {
  static const SysfsLayout* layout = [] {
    std::string tmpl = fabric::IsDirectory("/dev/shm") ? "/dev/shm" : "/tmp";
    tmpl += "/fabric-gid-fuzz.XXXXXX";
    FUZZ_CHECK(::mkdtemp(tmpl.data()) != nullptr);
    g_root = tmpl;
    std::atexit(RemoveTree);
    auto* l = new SysfsLayout(g_root + "/sys");
    FUZZ_CHECK(fabric::MkdirAll(l->PortGidsDir("rxe0", 1)).ok());
    FUZZ_CHECK(fabric::MkdirAll(l->PortGidTypesDir("rxe0", 1)).ok());
    FUZZ_CHECK(fabric::MkdirAll(l->PortGidNdevsDir("rxe0", 1)).ok());
    return l;
  }();
  return *layout;
}

bool LooksLikeGid(const std::string& t) {
  if (t.size() != 39) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (i % 5 == 4) {
      if (t[i] != ':') return false;
    } else if (!absl::ascii_isxdigit(static_cast<unsigned char>(t[i]))) {
      return false;
    }
  }
  return true;
}

std::string Print(const gid::GidBytes& b) {
  std::string out;
  for (int i = 0; i < 16; i += 2)
    out += absl::StrFormat("%s%02x%02x", i ? ":" : "", b[i], b[i + 1]);
  return out;
}

void SetFile(const std::string& path, bool present, const std::string& content) {
  if (present) {
    Write(path, content);
  } else {
    ::unlink(path.c_str());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const std::string text = in.ConsumeRandomLengthString(64);
  absl::StatusOr<gid::GidBytes> parsed = gid::ParseGid(text);
  FUZZ_CHECK(parsed.ok() == LooksLikeGid(text));
  if (parsed.ok()) {
    FUZZ_CHECK(Print(*parsed) == absl::AsciiStrToLower(text));
  } else {
    FUZZ_CHECK(parsed.status().code() == absl::StatusCode::kInvalidArgument);
  }
  (void)gid::ParseGidType(text);

  const SysfsLayout& layout = Layout();
  const std::string gids = layout.PortGidsDir("rxe0", 1);
  const std::string types = layout.PortGidTypesDir("rxe0", 1);
  const std::string ndevs = layout.PortGidNdevsDir("rxe0", 1);
  for (int i = 0; i < kSlots; ++i) {
    const uint8_t shape = in.ConsumeIntegral<uint8_t>();
    std::string g = in.ConsumeRandomLengthString(48);
    // Mostly well-formed GIDs (zero, IPv4-mapped, other), so the reader gets past parsing.
    if (shape % 4 == 0) g = "0000:0000:0000:0000:0000:0000:0000:0000";
    if (shape % 4 == 1) g = absl::StrFormat("0000:0000:0000:0000:0000:ffff:%04x:%04x", i, shape);
    if (shape % 4 == 2) g = absl::StrFormat("fe80:0000:0000:0000:%04x:00ff:fe12:3456", shape);
    std::string type = (shape & 0x10)   ? "RoCE v2\n"
                       : (shape & 0x20) ? "IB/RoCE v1\n"
                                        : in.ConsumeRandomLengthString(16);
    SetFile(absl::StrCat(gids, "/", i), (shape & 0x80) == 0, g + "\n");
    SetFile(absl::StrCat(types, "/", i), (shape & 0x40) == 0, type);
    SetFile(absl::StrCat(ndevs, "/", i), (shape & 0x08) == 0, in.ConsumeRandomLengthString(20));
  }
  absl::StatusOr<std::vector<GidEntry>> full = gid::ReadGidTable(layout, "rxe0", 1);
  if (!full.ok()) {
    FUZZ_CHECK(full.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  int last = -1;
  for (const GidEntry& e : *full) {
    FUZZ_CHECK(e.index > last && e.index < kSlots);
    last = e.index;
    absl::StatusOr<gid::GidBytes> b = gid::ParseGid(e.gid);
    FUZZ_CHECK(b.ok() && !gid::IsZero(*b));
    if (!e.netdev.empty()) FUZZ_CHECK(fabric::CheckExternalName("netdev", e.netdev, 15).ok());
  }
  const int limit = in.ConsumeIntegralInRange<int>(0, kSlots + 1);
  absl::StatusOr<std::vector<GidEntry>> bounded =
      gid::ReadGidTable(layout, "rxe0", 1, gid::GidScan{limit, nullptr});
  FUZZ_CHECK(bounded.ok());
  std::vector<GidEntry> below;
  for (const GidEntry& e : *full) {
    if (e.index < limit) below.push_back(e);
  }
  FUZZ_CHECK(*bounded == below);

  fabric::PortInfo port;
  port.link_layer = "Ethernet";
  port.gids = *full;
  const gid::RoceV2Ipv4 c = gid::FindRoceV2Ipv4(port, false, {"eth0"});
  int own = 0, upper = 0, only = -1;
  for (const GidEntry& e : *full) {
    if (e.type == GidType::kRoceV2 && gid::IsIpv4Mapped(*gid::ParseGid(e.gid))) {
      if (e.netdev == "eth0") {
        ++own;
        only = e.index;
      } else {
        ++upper;
      }
    }
  }
  FUZZ_CHECK(c.candidates == own);
  FUZZ_CHECK(c.on_upper == upper);
  FUZZ_CHECK(c.index.has_value() == (own == 1));
  if (c.index) FUZZ_CHECK(*c.index == only && !c.ipv4.empty() && c.netdev == "eth0");
  if (!c.index) FUZZ_CHECK(!c.reason.empty());
  return 0;
}
