#include "agent/kubeapi/watch_stream.h"

#include "absl/strings/str_cat.h"
#include "agent/base/utf8.h"

namespace fabric::kubeapi {

absl::Status WatchLineSplitter::Feed(absl::string_view data, const WatchLineHandler& on_line) {
  if (failed_)
    return absl::ResourceExhaustedError("watch stream: already failed on an over-long line");
  auto too_long = [&](size_t seen) {
    failed_ = true;
    pending_.clear();
    pending_.shrink_to_fit();
    return absl::ResourceExhaustedError(absl::StrCat("watch stream: an event line is longer than ",
                                                     max_line_bytes_, " bytes (", seen,
                                                     " bytes seen)"));
  };
  while (!data.empty() && !stopped_) {
    const size_t nl = data.find('\n');
    const absl::string_view chunk = data.substr(0, nl);
    if (nl == absl::string_view::npos) {
      // One byte of slack: a '\r' that the coming newline will strip.
      if (pending_.size() + chunk.size() > max_line_bytes_ + 1) {
        return too_long(pending_.size() + chunk.size());
      }
      pending_.append(chunk.data(), chunk.size());
      return absl::OkStatus();
    }
    absl::string_view line;
    if (pending_.empty()) {
      line = chunk;
    } else {
      pending_.append(chunk.data(), chunk.size());
      line = pending_;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > max_line_bytes_) return too_long(line.size());
    if (!line.empty() && !on_line(line)) stopped_ = true;
    pending_.clear();
    data.remove_prefix(nl + 1);
  }
  return absl::OkStatus();
}

absl::string_view WatchEventTypeName(WatchEvent::Type t) {
  switch (t) {
    case WatchEvent::Type::kAdded:
      return "ADDED";
    case WatchEvent::Type::kModified:
      return "MODIFIED";
    case WatchEvent::Type::kDeleted:
      return "DELETED";
    case WatchEvent::Type::kBookmark:
      return "BOOKMARK";
    case WatchEvent::Type::kError:
      return "ERROR";
  }
  return "?";
}

absl::StatusOr<WatchEvent> ParseWatchEvent(absl::string_view line) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("watch stream: ", why, " in event line \"",
                                                   EscapeBytes(line, 80), "\" (", line.size(),
                                                   " bytes)"));
  };
  // nlohmann rejects invalid UTF-8 inside strings, so every string that
  // parses is valid UTF-8.
  nlohmann::json j =
      nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not JSON (or not valid UTF-8)");
  if (!j.is_object()) return bad("not a JSON object");
  auto type_it = j.find("type");
  if (type_it == j.end() || !type_it->is_string()) return bad("no \"type\" string");
  const std::string& type = type_it->get_ref<const std::string&>();
  WatchEvent ev;
  if (type == "ADDED") {
    ev.type = WatchEvent::Type::kAdded;
  } else if (type == "MODIFIED") {
    ev.type = WatchEvent::Type::kModified;
  } else if (type == "DELETED") {
    ev.type = WatchEvent::Type::kDeleted;
  } else if (type == "BOOKMARK") {
    ev.type = WatchEvent::Type::kBookmark;
  } else if (type == "ERROR") {
    ev.type = WatchEvent::Type::kError;
  } else {
    return bad("unknown event type");
  }
  auto obj_it = j.find("object");
  if (obj_it == j.end() || !obj_it->is_object()) return bad("no \"object\" object");
  ev.object = std::move(*obj_it);
  if (ev.type == WatchEvent::Type::kError) return ev;
  auto md = ev.object.find("metadata");
  if (md == ev.object.end() || !md->is_object()) return bad("object without metadata");
  auto rv = md->find("resourceVersion");
  if (rv == md->end() || !rv->is_string() || rv->get_ref<const std::string&>().empty()) {
    return bad("object without metadata.resourceVersion");
  }
  ev.resource_version = rv->get<std::string>();
  return ev;
}

}  // namespace fabric::kubeapi
