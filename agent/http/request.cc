#include "agent/http/request.h"

#include <vector>

#include "absl/strings/ascii.h"
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
  const size_t first = head.find("\r\n");
  if (first == absl::string_view::npos) return out;
  for (absl::string_view line : absl::StrSplit(head.substr(first + 2), "\r\n")) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos ||
        !absl::EqualsIgnoreCase(line.substr(0, colon), "authorization")) {
      continue;
    }
    absl::string_view value = absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (value.size() > 7 && absl::StartsWithIgnoreCase(value, "bearer ")) {
      out.bearer_token = std::string(absl::StripAsciiWhitespace(value.substr(7)));
    }
  }
  return out;
}

}  // namespace fabric
