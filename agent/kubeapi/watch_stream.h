// The bytes of a watch stream: newline-delimited JSON events
// {"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{...}}.
// Both halves take hostile input (any bytes, any length) and fail with a
// named error instead of growing without bound or throwing.
#ifndef FABRIC_AGENT_KUBEAPI_WATCH_STREAM_H_
#define FABRIC_AGENT_KUBEAPI_WATCH_STREAM_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/kubeapi/kube_client.h"
#include "nlohmann/json.hpp"

namespace fabric::kubeapi {

// Splits a byte stream into lines of at most `max_line_bytes` (the newline
// not counted). Empty lines are skipped; "\r\n" ends a line too.
class WatchLineSplitter {
 public:
  explicit WatchLineSplitter(size_t max_line_bytes) : max_line_bytes_(max_line_bytes) {}

  // Feeds `data`, calling `on_line` for each complete line. Returns
  // kResourceExhausted once a line exceeds the bound (the splitter then stays
  // failed), or OK; stops early (OK, stopped() true) when on_line says false.
  absl::Status Feed(absl::string_view data, const WatchLineHandler& on_line);
  // Bytes of an unfinished line (a stream that ends here was cut off).
  size_t pending_bytes() const { return pending_.size(); }
  bool stopped() const { return stopped_; }

 private:
  size_t max_line_bytes_;
  std::string pending_;
  bool failed_ = false;
  bool stopped_ = false;
};

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type;
  nlohmann::json object;         // the object (for kError: the Status)
  std::string resource_version;  // object.metadata.resourceVersion ("" for kError)
};

absl::string_view WatchEventTypeName(WatchEvent::Type t);

// Parses one line. kInvalidArgument naming the problem (not JSON, not an
// object, unknown type, object missing or not an object, no
// metadata.resourceVersion on a non-error event); the message quotes at most
// a bounded, escaped prefix of the line.
absl::StatusOr<WatchEvent> ParseWatchEvent(absl::string_view line);

}  // namespace fabric::kubeapi

#endif  // FABRIC_AGENT_KUBEAPI_WATCH_STREAM_H_
