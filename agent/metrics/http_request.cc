#include "agent/metrics/http_request.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace fabric {

HttpRequestHead ParseRequestHead(absl::string_view head) {
  HttpRequestHead out;
  const absl::string_view line = head.substr(0, head.find("\r\n"));
  std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.")) return out;
  out.head_only = parts[0] == "HEAD";
  if (parts[0] != "GET" && !out.head_only) {
    out.status = 405;
    return out;
  }
  out.status = 0;
  const size_t q = parts[1].find('?');
  out.path = std::string(parts[1].substr(0, q));
  if (q != absl::string_view::npos) out.query = std::string(parts[1].substr(q + 1));
  return out;
}

}  // namespace fabric
