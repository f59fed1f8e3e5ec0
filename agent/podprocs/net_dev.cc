#include "agent/podprocs/net_dev.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/base/utf8.h"

namespace fabric::podprocs {
namespace {

constexpr size_t kIfNameMax = 15;  // IFNAMSIZ - 1
constexpr size_t kFields = 16;

bool ParseDecimal(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(s, out);
}

}  // namespace

absl::StatusOr<NetBytes> ParseNetDev(absl::string_view text) {
  if (text.size() > kMaxNetDevFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("net/dev of ", text.size(), " bytes"));
  }
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  // "Inter-|   Receive ...|  Transmit" and " face |bytes    packets ...".
  if (lines.size() < 2 || !absl::StartsWith(lines[0], "Inter-|") ||
      !absl::StrContains(lines[1], "|bytes")) {
    return absl::InvalidArgumentError("net/dev has no header");
  }
  NetBytes out;
  for (size_t i = 2; i < lines.size(); ++i) {
    const absl::string_view line = lines[i];
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("net/dev line ", i + 1, " has no ':': '", EscapeBytes(line), "'"));
    }
    // The kernel pads the name with spaces on the left only.
    absl::string_view name = line.substr(0, colon);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    if (name.empty() || name.size() > kIfNameMax ||
        name.find_first_of(" \t\r\v\f") != absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "net/dev line ", i + 1, " has no interface name: '", EscapeBytes(line), "'"));
    }
    std::vector<absl::string_view> fields =
        absl::StrSplit(line.substr(colon + 1), ' ', absl::SkipEmpty());
    uint64_t values[kFields];
    bool ok = fields.size() == kFields;
    for (size_t f = 0; ok && f < kFields; ++f) ok = ParseDecimal(fields[f], &values[f]);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("net/dev line ", i + 1, " is not ", kFields,
                                                     " counters: '", EscapeBytes(line), "'"));
    }
    if (name == "lo") continue;  // loopback never leaves the Pod
    const uint64_t rx = values[0], tx = values[8];
    if (out.rx_bytes + rx < out.rx_bytes || out.tx_bytes + tx < out.tx_bytes) {
      return absl::InvalidArgumentError("net/dev byte sum overflows 64 bits");
    }
    out.rx_bytes += rx;
    out.tx_bytes += tx;
    out.interfaces.push_back(CheckExternalName("interface", name, kIfNameMax).ok()
                                 ? std::string(name)
                                 : EscapeBytes(name));
  }
  return out;
}

}  // namespace fabric::podprocs
