#include "agent/observe/transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/base/utf8.h"
#include "agent/observe/window_facts.h"

namespace fabric::observe {

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kEfa:
      return "efa";
    case Verdict::kRdma:
      return "rdma";
    case Verdict::kTcp:
      return "tcp";
    case Verdict::kIdle:
      return "idle";
    case Verdict::kUnknown:
      return "unknown";
  }
  return "unknown";
}

const char* AttributionName(Attribution a) {
  switch (a) {
    case Attribution::kNone:
      return "none";
    case Attribution::kExclusive:
      return "exclusive";
    case Attribution::kSoleOwner:
      return "sole-owner";
    case Attribution::kSharedAmbiguous:
      return "shared-ambiguous";
    case Attribution::kPerProcess:
      return "per-process";
  }
  return "none";
}

absl::StatusOr<absl::Duration> ParseWindow(absl::string_view text_in) {
  const std::string text(absl::StripAsciiWhitespace(text_in));
  const std::string quoted = EscapeBytes(text, 32);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("window '", quoted, "': ", why, " (examples: 60s, 2m, 1m30s, 90)"));
  };
  if (text.empty()) return bad("empty");
  absl::Duration d = absl::ZeroDuration();
  uint64_t bare = 0;
  if (absl::SimpleAtoi(text, &bare)) {
    if (bare > 86400) return bad("out of range 15s..10m");
    d = absl::Seconds(static_cast<int64_t>(bare));
  } else {
    // Integer amounts with units h, m, s, each at most once and in that order.
    size_t i = 0;
    int last_rank = -1;
    while (i < text.size()) {
      size_t j = i;
      while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
      if (j == i || j == text.size()) return bad("expected <number><unit>");
      int64_t n = 0;
      if (j - i > 6 || !absl::SimpleAtoi(absl::string_view(text).substr(i, j - i), &n)) {
        return bad("number too large");
      }
      int rank = 0;
      switch (text[j]) {
        case 'h':
          rank = 0;
          d += absl::Hours(n);
          break;
        case 'm':
          rank = 1;
          d += absl::Minutes(n);
          break;
        case 's':
          rank = 2;
          d += absl::Seconds(n);
          break;
        default:
          return bad("unknown unit (s, m, h)");
      }
      if (rank <= last_rank) return bad("units out of order or repeated");
      last_rank = rank;
      i = j + 1;
    }
  }
  if (d < kMinWindow || d > kMaxWindow) return bad("out of range 15s..10m");
  return d;
}

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (unit < 5 && v >= 1024) {
    v /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", v, kUnits[unit]);
}

std::string HumanCount(uint64_t n) {
  std::string digits = absl::StrCat(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

WindowResult EvaluateWindow(const sampler::SampleRing& ring, absl::Duration window_length,
                            const TransportOptions& options) {
  WindowResult result;
  result.floor_bytes = options.floor_bytes;
  result.floor_packets = options.PacketFloor();
  window::Facts facts = window::Accumulate(ring, window_length, options);
  result.window = facts.window.bounds;
  for (const auto& [key, p] : facts.pods) {
    PodObservation po;
    po.ns = SanitizeUtf8(p.ns);
    po.pod = SanitizeUtf8(p.pod);
    po.pod_uid = SanitizeUtf8(p.uid);
    po.host_network = p.net.host_network;
    po.live = p.net.visible;
    for (const auto& [name, c] : p.containers) {
      po.containers.push_back(window::Evaluate(facts, p, name, c, options));
    }
    result.pods.push_back(std::move(po));
  }
  std::sort(result.pods.begin(), result.pods.end(),
            [](const PodObservation& a, const PodObservation& b) {
              return std::tie(a.ns, a.pod, a.pod_uid) < std::tie(b.ns, b.pod, b.pod_uid);
            });
  return result;
}

}  // namespace fabric::observe
