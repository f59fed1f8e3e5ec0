#include "plugin/cni/cni_config.h"

#include <cctype>
#include <sstream>

#include "agent/base/json_text.h"

namespace fabric::cni {
namespace {

using Json = nlohmann::ordered_json;

CniError Err(int code, std::string msg, std::string details = "") {
  return CniError{code, std::move(msg), std::move(details)};
}

std::optional<Command> ParseCommand(const std::string& s) {
  if (s == "ADD") return Command::kAdd;
  if (s == "DEL") return Command::kDel;
  if (s == "CHECK") return Command::kCheck;
  if (s == "STATUS") return Command::kStatus;
  if (s == "GC") return Command::kGc;
  if (s == "VERSION") return Command::kVersion;
  return std::nullopt;
}

std::optional<std::vector<int>> ParseVersion(const std::string& v) {
  std::vector<int> parts;
  std::string cur;
  for (size_t i = 0; i <= v.size(); ++i) {
    if (i == v.size() || v[i] == '.') {
      if (cur.empty() || cur.size() > 6) return std::nullopt;
      parts.push_back(std::stoi(cur));
      cur.clear();
    } else if (std::isdigit(static_cast<unsigned char>(v[i]))) {
      cur.push_back(v[i]);
    } else {
      return std::nullopt;
    }
  }
  if (parts.size() != 3) return std::nullopt;
  return parts;
}

// libcni's ValidateContainerID: ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$
bool ValidContainerId(const std::string& id) {
  if (id.empty() || !std::isalnum(static_cast<unsigned char>(id[0]))) return false;
  for (unsigned char c : id) {
    if (!std::isalnum(c) && c != '_' && c != '.' && c != '-') return false;
  }
  return true;
}

// libcni's ValidateInterfaceName.
bool ValidIfname(const std::string& name) {
  if (name.empty() || name.size() > 15 || name == "." || name == "..") return false;
  for (unsigned char c : name) {
    if (c == '/' || c == ':' || std::isspace(c)) return false;
  }
  return true;
}

std::string Env(const EnvLookup& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? "" : it->second;
}

// "K=V;K=V" (types.LoadArgs); a pair without '=' is an error there too.
bool ParseArgs(const std::string& s, std::map<std::string, std::string>* out) {
  std::stringstream ss(s);
  std::string pair;
  while (std::getline(ss, pair, ';')) {
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) return false;
    (*out)[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return true;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

const char* CommandName(Command c) {
  switch (c) {
    case Command::kAdd:
      return "ADD";
    case Command::kDel:
      return "DEL";
    case Command::kCheck:
      return "CHECK";
    case Command::kStatus:
      return "STATUS";
    case Command::kGc:
      return "GC";
    case Command::kVersion:
      return "VERSION";
  }
  return "?";
}

const std::vector<std::string>& SupportedVersions() {
  static const std::vector<std::string> v = {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"};
  return v;
}

std::optional<int> CompareVersions(const std::string& a, const std::string& b) {
  auto pa = ParseVersion(a), pb = ParseVersion(b);
  if (!pa || !pb) return std::nullopt;
  if (*pa < *pb) return -1;
  if (*pa > *pb) return 1;
  return 0;
}

std::variant<Invocation, CniError> ParseInvocation(const EnvLookup& env,
                                                   const std::string& stdin_data) {
  Invocation inv;
  std::string command = Env(env, "CNI_COMMAND");
  if (command.empty()) {
    return Err(kErrInvalidEnvironment, "CNI_COMMAND is not set",
               "fabric-cni is a CNI plugin: run it from a container runtime, or set CNI_COMMAND "
               "(ADD, DEL, CHECK, STATUS, GC, VERSION)");
  }
  auto cmd = ParseCommand(command);
  if (!cmd) {
    return Err(kErrInvalidEnvironment, "unknown CNI_COMMAND " + command,
               "expected one of ADD, DEL, CHECK, STATUS, GC, VERSION");
  }
  inv.command = *cmd;

  Json config = Json::parse(stdin_data, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    if (inv.command == Command::kVersion &&
        stdin_data.find_first_not_of(" \t\r\n") == std::string::npos) {
      inv.cni_version = kLatestVersion;  // VERSION with empty stdin: be helpful
      return inv;
    }
    return Err(kErrDecodingFailure, "cannot decode the network configuration on stdin",
               "stdin must be one JSON object (the plugin's network configuration)");
  }
  inv.config = config;

  auto version = config.find("cniVersion");
  if (version == config.end() || !version->is_string() || version->get<std::string>().empty()) {
    if (inv.command == Command::kVersion) {
      inv.cni_version = kLatestVersion;
      return inv;
    }
    return Err(kErrInvalidNetworkConfig, "network configuration has no \"cniVersion\" string",
               "add \"cniVersion\": \"1.0.0\" (or 0.4.0/1.1.0) to the network configuration");
  }
  inv.cni_version = version->get<std::string>();
  if (inv.command == Command::kVersion) return inv;

  bool supported = false;
  for (const auto& v : SupportedVersions()) supported = supported || v == inv.cni_version;
  if (!supported) {
    return Err(kErrIncompatibleVersion, "incompatible CNI version " + inv.cni_version,
               "fabric-cni supports " + Join(SupportedVersions()) +
                   "; set the network configuration's cniVersion to one of them");
  }
  auto at_least = [&](const char* v) {
    return CompareVersions(inv.cni_version, v).value_or(-1) >= 0;
  };
  if (inv.command == Command::kCheck && !at_least("0.4.0")) {
    return Err(kErrIncompatibleVersion, "config version does not allow CHECK",
               "CHECK needs cniVersion 0.4.0 or later");
  }
  if ((inv.command == Command::kStatus || inv.command == Command::kGc) && !at_least("1.1.0")) {
    return Err(kErrIncompatibleVersion,
               std::string("config version does not allow ") + CommandName(inv.command),
               std::string(CommandName(inv.command)) + " needs cniVersion 1.1.0");
  }

  auto name = config.find("name");
  if (name == config.end() || !name->is_string() || name->get<std::string>().empty()) {
    return Err(kErrInvalidNetworkConfig, "network configuration has no \"name\" string");
  }
  inv.network_name = name->get<std::string>();

  auto socket = config.find(kAgentSocketKey);
  if (socket != config.end()) {
    if (!socket->is_string() || socket->get<std::string>().empty()) {
      return Err(kErrInvalidNetworkConfig,
                 std::string("\"") + kAgentSocketKey +
                     "\" must be a non-empty string (a unix socket path)");
    }
    inv.agent_socket = socket->get<std::string>();
  }
  auto timeout = config.find(kTimeoutKey);
  if (timeout != config.end()) {
    if (!timeout->is_number() || timeout->get<double>() <= 0 || timeout->get<double>() > 600) {
      return Err(kErrInvalidNetworkConfig,
                 std::string("\"") + kTimeoutKey + "\" must be a number of seconds in (0, 600]");
    }
    inv.timeout_seconds = timeout->get<double>();
  }
  for (auto [key, out] :
       {std::pair{kLogFileKey, &inv.log_file}, std::pair{kLogLevelKey, &inv.log_level}}) {
    auto it = config.find(key);
    if (it == config.end()) continue;
    if (!it->is_string()) {
      return Err(kErrInvalidNetworkConfig, std::string("\"") + key + "\" must be a string");
    }
    *out = it->get<std::string>();
  }

  auto prev = config.find("prevResult");
  if (prev != config.end() && !prev->is_null()) {
    if (!prev->is_object()) {
      return Err(kErrInvalidNetworkConfig, "\"prevResult\" must be an object");
    }
    inv.prev_result = *prev;
  }

  if (inv.command == Command::kGc) {
    auto va = config.find("cni.dev/valid-attachments");
    if (va != config.end() && !va->is_null()) {
      if (!va->is_array()) {
        return Err(kErrInvalidNetworkConfig, "\"cni.dev/valid-attachments\" must be an array");
      }
      for (const auto& a : *va) {
        if (!a.is_object() || !a.contains("containerID") || !a["containerID"].is_string() ||
            !a.contains("ifname") || !a["ifname"].is_string()) {
          return Err(kErrInvalidNetworkConfig,
                     "each of \"cni.dev/valid-attachments\" needs string containerID and ifname");
        }
        inv.valid_attachments.push_back(
            {a["containerID"].get<std::string>(), a["ifname"].get<std::string>()});
      }
    }
  }

  // Environment, per command (SPEC.md "Parameters").
  if (inv.command == Command::kAdd || inv.command == Command::kDel ||
      inv.command == Command::kCheck) {
    inv.container_id = Env(env, "CNI_CONTAINERID");
    inv.netns = Env(env, "CNI_NETNS");
    inv.ifname = Env(env, "CNI_IFNAME");
    std::vector<std::string> missing;
    if (inv.container_id.empty()) missing.push_back("CNI_CONTAINERID");
    if (inv.netns.empty() && inv.command != Command::kDel) missing.push_back("CNI_NETNS");
    if (inv.ifname.empty()) missing.push_back("CNI_IFNAME");
    if (!missing.empty()) {
      return Err(kErrInvalidEnvironment, "required environment variables missing: " + Join(missing),
                 std::string("the runtime must set them for ") + CommandName(inv.command));
    }
    if (!ValidContainerId(inv.container_id)) {
      return Err(kErrInvalidEnvironment, "invalid characters in CNI_CONTAINERID",
                 "must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$");
    }
    if (!ValidIfname(inv.ifname)) {
      return Err(kErrInvalidEnvironment, "invalid CNI_IFNAME " + inv.ifname,
                 "at most 15 characters, no '/', ':' or whitespace");
    }
    if (!ParseArgs(Env(env, "CNI_ARGS"), &inv.args)) {
      return Err(kErrInvalidEnvironment, "malformed CNI_ARGS",
                 "expected K=V pairs separated by ';'");
    }
  }
  return inv;
}

std::string ErrorJson(const CniError& e, const std::string& cni_version) {
  Json j;
  j["cniVersion"] = cni_version.empty() ? std::string(kLatestVersion) : cni_version;
  j["code"] = e.code;
  j["msg"] = e.msg;
  if (!e.details.empty()) j["details"] = e.details;
  return DumpJson(j);
}

std::string VersionJson() {
  Json j;
  j["cniVersion"] = kLatestVersion;
  j["supportedVersions"] = SupportedVersions();
  return DumpJson(j);
}

std::string AddResultJson(const Invocation& inv) {
  if (inv.prev_result) return DumpJson(*inv.prev_result);
  Json j;
  j["cniVersion"] = inv.cni_version;
  return DumpJson(j);
}

}  // namespace fabric::cni
