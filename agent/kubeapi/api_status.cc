#include "agent/kubeapi/api_status.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "agent/base/utf8.h"

namespace fabric::kubeapi {
namespace {

constexpr size_t kMaxNameBytes = 253;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

absl::Status CheckPathPart(absl::string_view what, absl::string_view part) {
  if (part.empty() || part.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("resource path: ", what, " \"",
                                                   EscapeBytes(part), "\" must be 1-",
                                                   kMaxNameBytes, " bytes"));
  }
  for (char c : part) {
    if (!IsNameChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat("resource path: ", what, " \"",
                                                     EscapeBytes(part),
                                                     "\" has a character outside [a-z0-9.-]"));
    }
  }
  if (part == "." || part == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("resource path: ", what, " may not be \"", part, "\""));
  }
  return absl::OkStatus();
}

absl::StatusCode CodeFor(long http_code, absl::string_view reason) {
  if (reason == "AlreadyExists") return absl::StatusCode::kAlreadyExists;
  if (reason == "Forbidden") return absl::StatusCode::kPermissionDenied;
  switch (http_code) {
    case 400:
    case 415:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    default:
      break;
  }
  if (http_code >= 500 && http_code <= 599) return absl::StatusCode::kUnavailable;
  return absl::StatusCode::kUnknown;
}

std::string StringField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

absl::Status Build(long http_code, absl::string_view reason, absl::string_view server_message,
                   absl::string_view what) {
  std::string head = absl::StrCat(what, ": ");
  if (http_code == 410) head += "resourceVersion too old: ";
  std::string code_text = absl::StrCat("HTTP ", http_code);
  if (!reason.empty()) absl::StrAppend(&code_text, " ", SanitizeServerText(reason, 64));
  return absl::Status(
      CodeFor(http_code, reason),
      absl::StrCat(head, "API server answered ", code_text, server_message.empty() ? "" : ": ",
                   SanitizeServerText(server_message)));
}

}  // namespace

std::string SanitizeServerText(absl::string_view s, size_t max_len) {
  const bool truncated = s.size() > max_len;
  std::string valid = SanitizeUtf8(s.substr(0, max_len));
  std::string out;
  out.reserve(valid.size());
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < valid.size(); ++i) {
    const auto c = static_cast<uint8_t>(valid[i]);
    const bool c1 = c == 0xC2 && i + 1 < valid.size() && static_cast<uint8_t>(valid[i + 1]) <= 0x9F;
    if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else if (c1) {
      const auto c2 = static_cast<uint8_t>(valid[++i]);
      out += "\\u00";
      out += kHex[c2 >> 4];
      out += kHex[c2 & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (truncated) out += "...";
  return out;
}

absl::Status StatusFromApiStatusObject(const nlohmann::json& status, absl::string_view what) {
  if (!status.is_object()) {
    return absl::UnknownError(
        absl::StrCat(what, ": API server sent an error that is not a Status object"));
  }
  long code = 0;
  auto it = status.find("code");
  if (it != status.end() && it->is_number_integer()) code = it->get<long>();
  return Build(code, StringField(status, "reason"), StringField(status, "message"), what);
}

absl::Status StatusFromApiResponse(long http_code, absl::string_view body, absl::string_view what) {
  nlohmann::json j =
      nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && StringField(j, "kind") == "Status") {
    return Build(http_code, StringField(j, "reason"), StringField(j, "message"), what);
  }
  // Not a Status (a proxy's HTML page, an empty body): quote it escaped.
  return Build(http_code, "", body.empty() ? "" : absl::StrCat("\"", EscapeBytes(body, 200), "\""),
               what);
}

std::string DescribeRequest(absl::string_view verb, absl::string_view path) {
  if (!CheckResourcePath(path).ok()) return absl::StrCat(verb, " \"", EscapeBytes(path, 200), "\"");
  std::vector<absl::string_view> parts = absl::StrSplit(path.substr(1), '/');
  // /api/v1/... has one fewer segment before the resource than /apis/G/V/...
  size_t i = parts[0] == "api" ? 2 : 3;
  std::string ns;
  if (i + 1 < parts.size() && parts[i] == "namespaces" && i + 2 < parts.size()) {
    ns = std::string(parts[i + 1]);
    i += 2;
  }
  if (i >= parts.size()) return absl::StrCat(verb, " ", path);
  std::string out = absl::StrCat(verb, " ", parts[i]);
  if (i + 1 < parts.size()) {
    absl::StrAppend(&out, " ", ns.empty() ? "" : absl::StrCat(ns, "/"), parts[i + 1]);
    if (i + 2 < parts.size()) absl::StrAppend(&out, " (", parts[i + 2], ")");
  } else if (!ns.empty()) {
    absl::StrAppend(&out, " in namespace ", ns);
  }
  return out;
}

absl::Status CheckResourcePath(absl::string_view path) {
  const bool core = path.rfind("/api/", 0) == 0;
  const bool group = path.rfind("/apis/", 0) == 0;
  if (!core && !group) {
    return absl::InvalidArgumentError(absl::StrCat("resource path \"", EscapeBytes(path, 200),
                                                   "\" must start with /api/ or /apis/"));
  }
  std::vector<absl::string_view> parts = absl::StrSplit(path.substr(1), '/');
  const size_t min_parts = core ? 3 : 4;  // api/v1/R or apis/G/V/R
  if (parts.size() < min_parts || parts.size() > min_parts + 4) {
    return absl::InvalidArgumentError(absl::StrCat("resource path \"", EscapeBytes(path, 200),
                                                   "\" has ", parts.size(), " segments"));
  }
  for (absl::string_view p : parts) {
    auto st = CheckPathPart("segment", p);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(st.message(), " (in \"", EscapeBytes(path, 200), "\")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CollectionPath(absl::string_view api_prefix, absl::string_view resource,
                                           absl::string_view ns) {
  std::string path = absl::StrCat(api_prefix, "/");
  if (!ns.empty()) {
    auto st = CheckPathPart("namespace", ns);
    if (!st.ok()) return st;
    absl::StrAppend(&path, "namespaces/", ns, "/");
  }
  auto st = CheckPathPart("resource", resource);
  if (!st.ok()) return st;
  absl::StrAppend(&path, resource);
  st = CheckResourcePath(path);
  if (!st.ok()) return st;
  return path;
}

absl::StatusOr<std::string> ObjectPath(absl::string_view api_prefix, absl::string_view resource,
                                       absl::string_view ns, absl::string_view name,
                                       absl::string_view subresource) {
  auto collection = CollectionPath(api_prefix, resource, ns);
  if (!collection.ok()) return collection.status();
  auto st = CheckPathPart("name", name);
  if (!st.ok()) return st;
  std::string path = absl::StrCat(*collection, "/", name);
  if (!subresource.empty()) {
    st = CheckPathPart("subresource", subresource);
    if (!st.ok()) return st;
    absl::StrAppend(&path, "/", subresource);
  }
  st = CheckResourcePath(path);
  if (!st.ok()) return st;
  return path;
}

}  // namespace fabric::kubeapi
