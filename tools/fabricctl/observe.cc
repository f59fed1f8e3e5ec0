#include "tools/fabricctl/observe.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "agent/base/json_text.h"
#include "agent/http/get.h"

namespace fabric::fabricctl {
namespace {

int Severity(int code) {
  switch (code) {
    case kExitObserveFallback:
      return 4;
    case kExitObserveMismatch:
      return 3;
    case kExitObserveUnknown:
      return 2;
    case kExitObserveIdle:
      return 1;
    default:
      return 0;
  }
}

// "1.2 GiB" for bytes; "2,003 pkts" when only packets are counted; "-" for null.
std::string Amount(const nlohmann::json& c, const char* bytes_key, const char* packets_key) {
  auto b = c.find(bytes_key);
  if (b != c.end() && b->is_number_unsigned()) return FormatBytes(b->get<uint64_t>());
  if (packets_key != nullptr) {
    auto p = c.find(packets_key);
    if (p != c.end() && p->is_number_unsigned()) {
      return fmt::format("{} pkts", p->get<uint64_t>());
    }
  }
  return "-";
}

std::string PathOf(const ObserveOptions& o) {
  std::string path = "/v1/pods";
  if (!o.pod_name.empty()) path += "/" + o.pod_namespace + "/" + o.pod_name;
  if (!o.window.empty()) path += "?window=" + o.window;
  return path;
}

// The bearer token for https: --token-file (must be readable), else the
// projected token for the agent's audience, else the Pod's ServiceAccount
// token, when they exist, else none.
absl::StatusOr<std::string> BearerToken(const ObserveOptions& o) {
  std::string path = o.token_file;
  if (path.empty()) {
    path = std::ifstream(o.projected_token_file) ? o.projected_token_file : o.default_token_file;
  }
  std::ifstream f(path);
  if (!f) {
    if (o.token_file.empty()) return std::string();
    return absl::NotFoundError(fmt::format("--token-file {}: cannot be read", path));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return std::string(absl::StripAsciiWhitespace(ss.str()));
}

// GET from the agent: over TLS with the token for https://, plain otherwise.
absl::StatusOr<HttpResponse> AgentGet(const ObserveOptions& o, const std::string& path) {
  if (!absl::StartsWith(o.agent, "https://")) return HttpGet(o.agent, path);
  HttpsOptions h;
  h.ca_file = o.ca_file;
  h.insecure = o.insecure;
  h.server_name = o.server_name;
  auto token = BearerToken(o);
  if (!token.ok()) return token.status();
  h.bearer_token = *token;
  return HttpsGet(o.agent, path, h);
}

}  // namespace

int ContainerExitCode(const nlohmann::json& c, const std::string& expect) {
  const std::string verdict = StringAt(c, {"verdict"});
  if (verdict == "efa" || verdict == "rdma") {
    return !expect.empty() && expect != verdict ? kExitObserveMismatch : kExitOk;
  }
  if (verdict == "tcp") {
    const bool fallback = c.value("fallback", false);
    return fallback || !expect.empty() ? kExitObserveFallback : kExitOk;
  }
  if (verdict == "idle") return kExitObserveIdle;
  return kExitObserveUnknown;
}

int WorseObserveCode(int a, int b) { return Severity(a) >= Severity(b) ? a : b; }

std::string ObserveLines(const nlohmann::json& doc) {
  std::string out;
  const std::string pod = StringAt(doc, {"namespace"}) + "/" + StringAt(doc, {"pod"});
  const auto containers = doc.find("containers");
  if (containers == doc.end() || !containers->is_array()) return out;
  for (const auto& c : *containers) {
    std::string verdict = StringAt(c, {"verdict"});
    if (c.value("fallback", false)) verdict += " (fallback)";
    std::string note = StringAt(c, {"reason"});
    if (verdict == "idle") {
      auto last = c.find("last_non_idle");
      if (last != c.end() && last->is_object()) {
        note = fmt::format("last {} at {}", StringAt(*last, {"verdict"}), StringAt(*last, {"at"}));
      }
    }
    std::string name = StringAt(c, {"name"});
    out += fmt::format(
        "{:<32} {:<16} {:<16} {:<17} fabric {:<12} other {:<12} {}\n", pod,
        name.empty() ? "-" : name, verdict, StringAt(c, {"attribution"}),
        Amount(c, "fabric_bytes", "fabric_packets"),
        c.value("host_network", false) ? "hostNetwork" : Amount(c, "other_bytes", nullptr), note);
  }
  return out;
}

int RunObserve(const ObserveOptions& o, std::string* out, std::string* err) {
  const std::string path = PathOf(o);
  auto res = AgentGet(o, path);
  if (!res.ok()) {
    *err += fmt::format("fabricctl observe: cannot reach the agent: {}\n",
                        std::string(res.status().message()));
    return kExitError;
  }
  const auto body = nlohmann::ordered_json::parse(res->body, nullptr, false);
  const bool json = !body.is_discarded() && body.is_object();
  const std::string error = json ? body.value("error", "") : "";
  if (res->status != 200) {
    const std::string what = fmt::format("{}{}: HTTP {}", o.agent, path, res->status);
    if (res->status == 404 && !json) {
      *err += fmt::format(
          "fabricctl observe: {}: the agent serves no /v1/pods (it runs without "
          "--observe)\n",
          what);
      return kExitError;
    }
    *err += fmt::format("fabricctl observe: {}: {}\n", what, error.empty() ? res->body : error);
    if (res->status == 401 || res->status == 403) {
      *err += absl::StartsWith(o.agent, "https://")
                  ? "fabricctl observe: the agent asks the API server: the token must be valid and "
                    "its user allowed to get this Pod (list pods without --pod)\n"
                  : "fabricctl observe: ask over https with --ca-file (or $FABRIC_AGENT_CA_FILE) "
                    "and a ServiceAccount token\n";
      return kExitError;
    }
    if (res->status == 400) return kExitUsage;
    // 404: no grant and no fabric resources for this Pod; 503: no sample yet.
    if (res->status == 404 || res->status == 503) return kExitObserveUnknown;
    return kExitError;
  }
  if (!json) {
    *err += fmt::format("fabricctl observe: {}{}: not a JSON document\n", o.agent, path);
    return kExitError;
  }
  std::vector<nlohmann::ordered_json> pods;
  if (o.pod_name.empty()) {
    auto items = body.find("items");
    if (items != body.end() && items->is_array()) {
      for (const auto& p : *items) pods.push_back(p);
    }
  } else {
    pods.push_back(body);
  }
  int code = kExitOk;
  for (const auto& p : pods) {
    auto containers = p.find("containers");
    if (containers == p.end() || !containers->is_array()) continue;
    for (const auto& c : *containers) {
      code = WorseObserveCode(code, ContainerExitCode(nlohmann::json(c), o.expect));
    }
  }
  if (o.format == OutputFormat::kJson) {
    *out += DumpJson(body, 2) + "\n";
  } else if (pods.empty()) {
    *out += "no Pod on this node holds a fabric grant or owns fabric resources\n";
  } else {
    *out += fmt::format("{:<32} {:<16} {:<16} {:<17} {:<19} {:<18} {}\n", "POD", "CONTAINER",
                        "VERDICT", "ATTRIBUTION", "FABRIC", "OTHER", "NOTE");
    for (const auto& p : pods) *out += ObserveLines(nlohmann::json(p));
    if (!o.expect.empty() && code == kExitObserveMismatch) {
      *out += fmt::format("expected {}: a container uses another fabric\n", o.expect);
    }
  }
  return code;
}

}  // namespace fabric::fabricctl
