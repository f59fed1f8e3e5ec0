// One line of a Kubernetes watch stream ({"type":...,"object":{...}}) as the
// API server sends it: ParseWatchEvent (agent/kubeapi/watch_stream.h).
// Input: any bytes, as one line (ParseWatchEvent) and as a stream (below).
// Invariant: the parser never throws or crashes and fails only with
// kInvalidArgument, its message valid UTF-8 quoting at most a bounded prefix
// of the line; an accepted event has one of the five types and a JSON object;
// a non-ERROR event carries the object's non-empty
// metadata.resourceVersion, an ERROR event none; the event written back as a
// line (DumpJson) parses to the same event. (The parser itself takes any
// depth; only this write-back, whose copy, dump and == recurse, is skipped
// for objects nested deeper than kMaxRoundTripDepth.)
// The same bytes also go through WatchLineSplitter (bound kMaxLine), whole
// and cut in two (after 0, 1, a third and half of the bytes): all give the same
// lines (each non-empty, without '\n', at most kMaxLine bytes), the same
// failure or success, and the same unfinished tail.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "agent/base/json_text.h"
#include "agent/base/utf8.h"
#include "agent/kubeapi/watch_stream.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::kubeapi::ParseWatchEvent;
using fabric::kubeapi::WatchEvent;
using fabric::kubeapi::WatchEventTypeName;

bool OneOfFive(WatchEvent::Type t) {
  switch (t) {
    case WatchEvent::Type::kAdded:
    case WatchEvent::Type::kModified:
    case WatchEvent::Type::kDeleted:
    case WatchEvent::Type::kBookmark:
    case WatchEvent::Type::kError:
      return true;
  }
  return false;
}

constexpr size_t kMaxRoundTripDepth = 512;
constexpr size_t kMaxLine = 64;

struct Split {
  std::vector<std::string> lines;
  bool ok = true;
  size_t pending = 0;
};

Split SplitLines(absl::string_view data, size_t cut) {
  Split out;
  fabric::kubeapi::WatchLineSplitter splitter(kMaxLine);
  auto keep = [&](absl::string_view l) {
    out.lines.emplace_back(l);
    return true;
  };
  absl::Status st = splitter.Feed(data.substr(0, cut), keep);
  if (st.ok()) st = splitter.Feed(data.substr(cut), keep);
  out.ok = st.ok();
  FUZZ_CHECK(st.ok() || st.code() == absl::StatusCode::kResourceExhausted);
  out.pending = splitter.pending_bytes();
  return out;
}

void CheckSplitter(absl::string_view data) {
  const Split whole = SplitLines(data, data.size());
  for (const std::string& l : whole.lines) {
    FUZZ_CHECK(!l.empty() && l.size() <= kMaxLine && l.find('\n') == std::string::npos);
  }
  FUZZ_CHECK(whole.pending <= kMaxLine + 1);
  for (size_t cut : {size_t{0}, data.size() / 2, data.size() / 3, size_t{1}}) {
    if (cut > data.size()) continue;
    const Split parts = SplitLines(data, cut);
    FUZZ_CHECK(parts.ok == whole.ok && parts.lines == whole.lines);
    if (whole.ok) FUZZ_CHECK(parts.pending == whole.pending);
  }
}

// Nesting depth of `j`, without recursing (the input may be very deep).
size_t Depth(const nlohmann::json& j) {
  size_t deepest = 0;
  std::vector<std::pair<const nlohmann::json*, size_t>> todo = {{&j, 1}};
  while (!todo.empty()) {
    auto [node, depth] = todo.back();
    todo.pop_back();
    deepest = std::max(deepest, depth);
    if (node->is_structured()) {
      for (const nlohmann::json& child : *node) todo.emplace_back(&child, depth + 1);
    }
  }
  return deepest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view line(reinterpret_cast<const char*>(data), size);
  CheckSplitter(line);
  absl::StatusOr<WatchEvent> ev = ParseWatchEvent(line);
  if (!ev.ok()) {
    FUZZ_CHECK(ev.status().code() == absl::StatusCode::kInvalidArgument);
    FUZZ_CHECK(fabric::IsValidUtf8(ev.status().message()));
    // The quoted prefix is bounded: the message does not grow with the line.
    FUZZ_CHECK(ev.status().message().size() < 1024);
    return 0;
  }
  FUZZ_CHECK(OneOfFive(ev->type));
  FUZZ_CHECK(ev->object.is_object());
  if (ev->type == WatchEvent::Type::kError) {
    FUZZ_CHECK(ev->resource_version.empty());
  } else {
    FUZZ_CHECK(!ev->resource_version.empty() && fabric::IsValidUtf8(ev->resource_version));
    const nlohmann::json& rv = ev->object.at("metadata").at("resourceVersion");
    FUZZ_CHECK(rv.is_string() && rv.get_ref<const std::string&>() == ev->resource_version);
  }
  if (Depth(ev->object) > kMaxRoundTripDepth) return 0;
  const nlohmann::json written = {{"type", std::string(WatchEventTypeName(ev->type))},
                                  {"object", ev->object}};
  absl::StatusOr<WatchEvent> again = ParseWatchEvent(fabric::DumpJson(written));
  FUZZ_CHECK(again.ok() && again->type == ev->type && again->object == ev->object &&
             again->resource_version == ev->resource_version);
  return 0;
}
