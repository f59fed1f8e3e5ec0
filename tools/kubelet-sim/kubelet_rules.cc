#include "tools/kubelet-sim/kubelet_rules.h"

#include <fmt/format.h>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace fabric::sim {
namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

// [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool IsDns1123Label(const std::string& label) {
  if (label.empty()) return false;
  if (!IsLowerAlnum(label.front()) || !IsLowerAlnum(label.back())) return false;
  for (char c : label) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9], at most 63 characters.
bool IsQualifiedNamePart(const std::string& name) {
  constexpr size_t kQualifiedNameMaxLength = 63;
  if (name.empty() || name.size() > kQualifiedNameMaxLength) return false;
  if (!IsAlnum(name.front()) || !IsAlnum(name.back())) return false;
  for (char c : name) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

}  // namespace

bool IsDns1123Subdomain(const std::string& value) {
  constexpr size_t kDns1123SubdomainMaxLength = 253;
  if (value.empty() || value.size() > kDns1123SubdomainMaxLength) return false;
  for (absl::string_view label : absl::StrSplit(value, '.')) {
    if (!IsDns1123Label(std::string(label))) return false;
  }
  return true;
}

bool IsQualifiedName(const std::string& value) {
  std::vector<std::string> parts = absl::StrSplit(value, '/');
  std::string name;
  switch (parts.size()) {
    case 1:
      name = parts[0];
      break;
    case 2:
      if (parts[0].empty() || !IsDns1123Subdomain(parts[0])) return false;
      name = parts[1];
      break;
    default:
      return false;
  }
  return IsQualifiedNamePart(name);
}

bool IsExtendedResourceName(const std::string& name) {
  // IsNativeResource: no '/' at all, or anything in the kubernetes.io/ namespace
  // (a substring check in the Go code, not a prefix check).
  if (!absl::StrContains(name, "/") || absl::StrContains(name, "kubernetes.io/")) return false;
  if (absl::StartsWith(name, "requests.")) return false;
  // The quota system prefixes the name with "requests."; that must still be a
  // qualified name (so the prefix part must be a lowercase DNS subdomain).
  return IsQualifiedName("requests." + name);
}

std::string GoQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '\a':
        out += "\\a";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\v':
        out += "\\v";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);  // UTF-8 passes through, as for valid runes in Go.
        }
    }
  }
  out += '"';
  return out;
}

std::string GoQuoteList(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  quoted.reserve(items.size());
  for (const auto& item : items) quoted.push_back(GoQuote(item));
  return "[" + absl::StrJoin(quoted, " ") + "]";
}

std::string GoList(const std::vector<std::string>& items) {
  return "[" + absl::StrJoin(items, " ") + "]";
}

std::string GoCleanPath(const std::string& path) {
  if (path.empty()) return ".";
  const bool rooted = path.front() == '/';
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!out.empty() && out.back() != "..") {
        out.pop_back();
      } else if (!rooted) {
        out.emplace_back("..");
      }
      continue;
    }
    out.emplace_back(part);
  }
  std::string joined = absl::StrJoin(out, "/");
  if (rooted) return "/" + joined;
  return joined.empty() ? "." : joined;
}

std::string GoJoinPath(const std::string& dir, const std::string& elem) {
  if (dir.empty()) return elem.empty() ? "" : GoCleanPath(elem);
  if (elem.empty()) return GoCleanPath(dir);
  return GoCleanPath(dir + "/" + elem);
}

std::string GoGrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "Canceled";
    case grpc::StatusCode::UNKNOWN:
      return "Unknown";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "InvalidArgument";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DeadlineExceeded";
    case grpc::StatusCode::NOT_FOUND:
      return "NotFound";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "AlreadyExists";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PermissionDenied";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "ResourceExhausted";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FailedPrecondition";
    case grpc::StatusCode::ABORTED:
      return "Aborted";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OutOfRange";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "Unimplemented";
    case grpc::StatusCode::INTERNAL:
      return "Internal";
    case grpc::StatusCode::UNAVAILABLE:
      return "Unavailable";
    case grpc::StatusCode::DATA_LOSS:
      return "DataLoss";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "Unauthenticated";
    default:
      return fmt::format("Code({})", static_cast<int>(code));
  }
}

std::string GoGrpcError(const grpc::Status& status) {
  return fmt::format("rpc error: code = {} desc = {}", GoGrpcCodeName(status.error_code()),
                     status.error_message());
}

}  // namespace fabric::sim
