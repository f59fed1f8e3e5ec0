#include "agent/cdi/cdi_spec.h"

#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "agent/base/json_text.h"
#include "agent/base/status_macros.h"

namespace fabric::cdi {
namespace {

using Json = nlohmann::ordered_json;

bool IsLetter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsLetter(c) || IsDigit(c); }

// Vendor and class share one rule in the parser: start with a letter, end with
// a letter or digit, [A-Za-z0-9_.-] between. Single-character names are
// rejected because the v0.5.x parser slices name[1:len-1] and would panic.
absl::Status ValidateVendorOrClass(const std::string& what, const std::string& name,
                                   const std::string& kind, size_t max_len) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid CDI kind \"", kind, "\": ", what, " \"", name, "\" ", why));
  };
  if (name.size() < 2) return bad("must be at least 2 characters");
  if (name.size() > max_len) return bad(absl::StrCat("is longer than ", max_len, " characters"));
  if (!IsLetter(name.front())) return bad("must start with a letter");
  if (!IsAlnum(name.back())) return bad("must end with a letter or digit");
  for (char c : name) {
    if (!IsAlnum(c) && c != '_' && c != '-' && c != '.') {
      return bad(absl::StrCat("contains '", std::string(1, c), "' (allowed: A-Z a-z 0-9 _ - .)"));
    }
  }
  return absl::OkStatus();
}

std::pair<std::string, std::string> SplitKind(const std::string& kind) {
  size_t slash = kind.find('/');
  if (slash == std::string::npos) return {"", kind};
  return {kind.substr(0, slash), kind.substr(slash + 1)};
}

absl::Status ValidateEnv(const std::vector<std::string>& env, const std::string& where) {
  for (const std::string& e : env) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid environment entry \"", e, "\" in ", where, ": want K=V"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateNode(const DeviceNode& n, const std::string& where) {
  if (n.path.empty() || n.path.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("device node path \"", n.path, "\" in ", where, " must be absolute"));
  }
  if (!n.host_path.empty() && n.host_path.front() != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("device node hostPath \"", n.host_path, "\" in ", where, " must be absolute"));
  }
  if (n.permissions.empty() || n.permissions.find_first_not_of("rwm") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("device node ", n.path, " in ", where,
                                                   ": permissions \"", n.permissions,
                                                   "\" must be a non-empty subset of \"rwm\""));
  }
  return absl::OkStatus();
}

bool EmitsHostPath(const DeviceNode& n) { return !n.host_path.empty() && n.host_path != n.path; }

Json NodeJson(const DeviceNode& n) {
  Json j;
  j["path"] = n.path;
  if (EmitsHostPath(n)) j["hostPath"] = n.host_path;
  // Type and numbers given explicitly: the runtime then does not stat the host
  // node, and the container gets exactly the numbers we discovered.
  j["type"] = "c";
  j["major"] = n.major;
  j["minor"] = n.minor;
  if (n.file_mode != 0) j["fileMode"] = n.file_mode;
  j["permissions"] = n.permissions;
  return j;
}

Json EditsJson(const std::vector<DeviceNode>& nodes, const std::vector<std::string>& env,
               const std::optional<HookConfig>& hook) {
  Json j = Json::object();
  if (!env.empty()) j["env"] = env;
  if (!nodes.empty()) {
    Json arr = Json::array();
    for (const DeviceNode& n : nodes) arr.push_back(NodeJson(n));
    j["deviceNodes"] = std::move(arr);
  }
  if (hook) {
    Json h;
    h["hookName"] = hook->hook_name;
    h["path"] = hook->path;
    if (!hook->args.empty()) h["args"] = hook->args;
    if (!hook->env.empty()) h["env"] = hook->env;
    j["hooks"] = Json::array({h});
  }
  return j;
}

}  // namespace

HookConfig MemlockHook(const std::string& host_path, const std::string& limit) {
  HookConfig h;
  h.path = host_path;
  h.args = {"fabric-memlock-hook", absl::StrCat("--memlock=", limit)};
  return h;
}

std::string KindForResource(const std::string& resource) {
  auto [vendor, cls] = SplitKind(resource);
  if (vendor.empty()) vendor = "fabric.local";
  for (char& c : vendor) {
    if (!IsAlnum(c) && c != '_' && c != '-' && c != '.') c = '-';
  }
  for (char& c : cls) {
    if (!IsAlnum(c) && c != '_' && c != '-') c = '_';
  }
  return absl::StrCat(vendor, "/", cls);
}

std::string QualifiedName(const std::string& kind, const std::string& device) {
  return absl::StrCat(kind, "=", device);
}

absl::Status ValidateKind(const std::string& kind) {
  auto [vendor, cls] = SplitKind(kind);
  if (vendor.empty() || cls.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid CDI kind \"", kind, "\": want \"vendor/class\""));
  }
  // Kind rule: vendor is a DNS-subdomain-like prefix (<=253), class a label (<=63).
  FABRIC_RETURN_IF_ERROR(ValidateVendorOrClass("vendor", vendor, kind, 253));
  FABRIC_RETURN_IF_ERROR(ValidateVendorOrClass("class", cls, kind, 63));
  return absl::OkStatus();
}

absl::Status ValidateDeviceName(const std::string& name) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid CDI device name \"", name, "\": ", why));
  };
  if (name.empty()) return bad("empty");
  if (!IsAlnum(name.front())) return bad("must start with a letter or digit");
  if (!IsAlnum(name.back())) return bad("must end with a letter or digit");
  for (char c : name) {
    if (!IsAlnum(c) && c != '_' && c != '-' && c != '.' && c != ':') {
      return bad(absl::StrCat("contains '", std::string(1, c), "' (allowed: A-Z a-z 0-9 _ - . :)"));
    }
  }
  return absl::OkStatus();
}

std::string MinimumVersion(const CdiSpecInput& input) {
  // Mirrors requiresV0x0() in container-device-interface pkg/cdi/version.go for
  // the features we can emit. We never emit annotations, mounts or intelRdt.
  auto [vendor, cls] = SplitKind(input.kind);
  if (!vendor.empty() && cls.find('.') != std::string::npos) return "0.6.0";
  for (const CdiDevice& d : input.devices) {
    if (!d.name.empty() && !IsLetter(d.name.front())) return "0.5.0";
    for (const DeviceNode& n : d.nodes) {
      if (EmitsHostPath(n)) return "0.5.0";
    }
  }
  for (const DeviceNode& n : input.common_nodes) {
    if (EmitsHostPath(n)) return "0.5.0";
  }
  return "0.3.0";
}

absl::StatusOr<std::string> RenderSpec(const CdiSpecInput& input) {
  FABRIC_RETURN_IF_ERROR(ValidateKind(input.kind));
  if (input.devices.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CDI spec for ", input.kind, " needs at least one device"));
  }
  std::set<std::string> seen;
  for (const CdiDevice& d : input.devices) {
    FABRIC_RETURN_IF_ERROR(ValidateDeviceName(d.name));
    if (!seen.insert(d.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate CDI device name \"", d.name, "\" in ", input.kind));
    }
    if (d.nodes.empty() && d.env.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CDI device ", QualifiedName(input.kind, d.name), " has no device nodes and no env"));
    }
    const std::string where = QualifiedName(input.kind, d.name);
    for (const DeviceNode& n : d.nodes) FABRIC_RETURN_IF_ERROR(ValidateNode(n, where));
    FABRIC_RETURN_IF_ERROR(ValidateEnv(d.env, where));
  }
  for (const DeviceNode& n : input.common_nodes) {
    FABRIC_RETURN_IF_ERROR(ValidateNode(n, input.kind));
  }
  if (input.memlock_hook) {
    const HookConfig& h = *input.memlock_hook;
    if (h.hook_name != "createRuntime" && h.hook_name != "prestart") {
      return absl::InvalidArgumentError(absl::StrCat(
          "hook name \"", h.hook_name, "\" unsupported: use createRuntime or prestart"));
    }
    if (h.path.empty() || h.path.front() != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("hook path \"", h.path, "\" must be absolute (OCI runtime spec)"));
    }
    FABRIC_RETURN_IF_ERROR(ValidateEnv(h.env, "hook " + h.path));
  }

  Json spec;
  spec["cdiVersion"] = MinimumVersion(input);
  spec["kind"] = input.kind;
  Json devices = Json::array();
  for (const CdiDevice& d : input.devices) {
    Json dj;
    dj["name"] = d.name;
    dj["containerEdits"] = EditsJson(d.nodes, d.env, std::nullopt);
    devices.push_back(std::move(dj));
  }
  spec["devices"] = std::move(devices);
  if (!input.common_nodes.empty() || input.memlock_hook) {
    spec["containerEdits"] = EditsJson(input.common_nodes, {}, input.memlock_hook);
  }
  return DumpJson(spec, 2) + "\n";
}

absl::StatusOr<CdiSpecInput> ParseSpec(const std::string& json_text) {
  Json spec = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded() || !spec.is_object()) {
    return absl::InvalidArgumentError("CDI spec is not a JSON object");
  }
  CdiSpecInput out;
  // json::get<> throws on type mismatches; the text is ours but may have been
  // edited by hand, so any mismatch becomes an error instead of a crash.
  try {
    out.kind = spec.value("kind", "");
    auto parse_nodes = [](const Json& edits, std::vector<DeviceNode>* nodes) {
      if (!edits.contains("deviceNodes")) return;
      for (const Json& nj : edits.at("deviceNodes")) {
        DeviceNode n;
        n.path = nj.at("path").get<std::string>();
        n.host_path = nj.value("hostPath", "");
        n.major = nj.value("major", 0u);
        n.minor = nj.value("minor", 0u);
        n.file_mode = nj.value("fileMode", 0u);
        n.permissions = nj.value("permissions", "rw");
        nodes->push_back(std::move(n));
      }
    };
    for (const Json& dj : spec.at("devices")) {
      CdiDevice d;
      d.name = dj.at("name").get<std::string>();
      const Json& edits = dj.at("containerEdits");
      parse_nodes(edits, &d.nodes);
      if (edits.contains("env")) d.env = edits.at("env").get<std::vector<std::string>>();
      out.devices.push_back(std::move(d));
    }
    if (spec.contains("containerEdits")) {
      const Json& edits = spec.at("containerEdits");
      parse_nodes(edits, &out.common_nodes);
      if (edits.contains("hooks") && !edits.at("hooks").empty()) {
        const Json& hj = edits.at("hooks").at(0);
        HookConfig h;
        h.hook_name = hj.at("hookName").get<std::string>();
        h.path = hj.at("path").get<std::string>();
        if (hj.contains("args")) h.args = hj.at("args").get<std::vector<std::string>>();
        if (hj.contains("env")) h.env = hj.at("env").get<std::vector<std::string>>();
        out.memlock_hook = std::move(h);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed CDI spec: ", e.what()));
  }
  return out;
}

std::string SpecFileName(const std::string& kind) {
  std::string name = kind;
  for (char& c : name) {
    if (c == '/') c = '-';
  }
  return name + ".json";
}

}  // namespace fabric::cdi
