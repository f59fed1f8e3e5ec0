#include "plugin/cni/cni_plugin.h"

#include <cstdio>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"

namespace fabric::cni {
namespace {

// Appends log lines to the configured "logFile" as well as stderr.
class FileLogSink {
 public:
  explicit FileLogSink(const std::string& path) : file_(std::fopen(path.c_str(), "ae")) {
    if (!file_) return;
    SetLogSink([this](Component c, LogLevel level, std::string_view msg) {
      static const char* kLevels[] = {"D", "I", "W", "E"};
      std::lock_guard<std::mutex> lock(mu_);
      std::fprintf(file_, "%s [%.*s] %.*s\n", kLevels[static_cast<int>(level)],
                   static_cast<int>(ComponentName(c).size()), ComponentName(c).data(),
                   static_cast<int>(msg.size()), msg.data());
      std::fflush(file_);
    });
  }
  ~FileLogSink() {
    if (!file_) return;
    SetLogSink(nullptr);
    std::fclose(file_);
  }

 private:
  std::mutex mu_;
  std::FILE* file_;
};

PluginOutput Fail(const CniError& e, const Invocation* inv) {
  LogError(Component::kCni, "CNI error {}: {}{}", e.code, e.msg,
           e.details.empty() ? "" : "; " + e.details);
  return PluginOutput{1, ErrorJson(e, inv ? inv->cni_version : "")};
}

agentpb::CniRequest MakeRequest(const Invocation& inv) {
  agentpb::CniRequest req;
  req.set_container_id(inv.container_id);
  req.set_netns(inv.netns);
  req.set_ifname(inv.ifname);
  req.set_pod_namespace(inv.Arg("K8S_POD_NAMESPACE"));
  req.set_pod_name(inv.Arg("K8S_POD_NAME"));
  req.set_pod_uid(inv.Arg("K8S_POD_UID"));
  req.set_network_name(inv.network_name);
  req.set_cni_version(inv.cni_version);
  return req;
}

CniError Unreachable(const Invocation& inv, const absl::Status& s, int code) {
  return CniError{code, std::string(s.message()),
                  absl::StrCat("start the fabric agent on this node, and make its --agent-socket "
                               "match the network configuration's \"",
                               kAgentSocketKey, "\" (now ", inv.agent_socket, ")")};
}

CniError FromAgent(const Invocation& inv, const absl::Status& s) {
  int code = CniCodeForAgentError(s);
  std::string details = code == kErrTryAgainLater
                            ? "transient; the runtime retries"
                            : "see the fabric agent's log on this node for the device state";
  return CniError{code, absl::StrCat("fabric agent: ", s.message()), details};
}

void LogResponse(const Invocation& inv, const agentpb::CniResponse& resp) {
  for (const auto& w : resp.warnings()) LogWarn(Component::kCni, "{}", w);
  for (const auto& d : resp.devices()) {
    LogInfo(Component::kCni, "{} {}/{}: {} {} -> {} ({})", CommandName(inv.command),
            inv.Arg("K8S_POD_NAMESPACE"), inv.Arg("K8S_POD_NAME"), d.resource(), d.device_id(),
            d.rdma_device(), agentpb::DeviceAttachment::Action_Name(d.action()));
  }
}

}  // namespace

int CniCodeForAgentError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return kErrInvalidEnvironment;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
      return kErrTryAgainLater;
    case absl::StatusCode::kFailedPrecondition:
      return kErrDeviceNetns;
    default:
      return kErrInternal;
  }
}

PluginOutput RunPlugin(const EnvLookup& env, const std::string& stdin_data,
                       const AgentClientFactory& make_client) {
  auto parsed = ParseInvocation(env, stdin_data);
  if (auto* err = std::get_if<CniError>(&parsed)) return Fail(*err, nullptr);
  const Invocation& inv = std::get<Invocation>(parsed);

  LogLevel level;
  if (!inv.log_level.empty() && ParseLogLevel(inv.log_level, &level)) SetLogLevel(level);
  std::unique_ptr<FileLogSink> file_sink;
  if (!inv.log_file.empty()) file_sink = std::make_unique<FileLogSink>(inv.log_file);

  if (inv.command == Command::kVersion) return PluginOutput{0, VersionJson()};

  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(inv.timeout_seconds * 1000));
  std::unique_ptr<AgentClient> client = make_client(inv.agent_socket, timeout);

  switch (inv.command) {
    case Command::kAdd: {
      if (!inv.prev_result) {
        LogWarn(Component::kCni,
                "no prevResult: fabric-cni is meant to be chained after the Pod's main network "
                "plugin; returning an empty result");
      }
      auto resp = client->Add(MakeRequest(inv));
      if (!resp.ok()) {
        if (client->last_failure_unreachable()) {
          return Fail(Unreachable(inv, resp.status(), kErrTryAgainLater), &inv);
        }
        return Fail(FromAgent(inv, resp.status()), &inv);
      }
      LogResponse(inv, *resp);
      return PluginOutput{0, AddResultJson(inv)};
    }
    case Command::kDel: {
      auto resp = client->Del(MakeRequest(inv));
      if (!resp.ok()) {
        if (client->last_failure_unreachable()) {
          // DEL must not wedge Pod teardown on a stopped agent: the agent keeps
          // its record, and CNI GC (or its own reconcile) releases it later.
          LogWarn(Component::kCni,
                  "DEL for container {}: {}; succeeding, the agent's state releases the devices "
                  "later (CNI GC)",
                  inv.container_id, resp.status().message());
          return PluginOutput{0, ""};
        }
        return Fail(FromAgent(inv, resp.status()), &inv);
      }
      LogResponse(inv, *resp);
      return PluginOutput{0, ""};
    }
    case Command::kCheck: {
      auto resp = client->Check(MakeRequest(inv));
      if (!resp.ok()) {
        if (client->last_failure_unreachable()) {
          return Fail(Unreachable(inv, resp.status(), kErrTryAgainLater), &inv);
        }
        return Fail(FromAgent(inv, resp.status()), &inv);
      }
      for (const auto& w : resp->warnings()) LogWarn(Component::kCni, "{}", w);
      return PluginOutput{0, ""};
    }
    case Command::kGc: {
      agentpb::GcRequest req;
      req.set_network_name(inv.network_name);
      for (const auto& a : inv.valid_attachments) {
        auto* out = req.add_valid_attachments();
        out->set_container_id(a.container_id);
        out->set_ifname(a.ifname);
      }
      auto resp = client->Gc(req);
      if (!resp.ok()) {
        if (client->last_failure_unreachable()) {
          return Fail(Unreachable(inv, resp.status(), kErrTryAgainLater), &inv);
        }
        return Fail(FromAgent(inv, resp.status()), &inv);
      }
      for (const auto& w : resp->warnings()) LogWarn(Component::kCni, "GC: {}", w);
      if (resp->released() > 0) {
        LogInfo(Component::kCni, "GC released {} stale attachment(s)", resp->released());
      }
      return PluginOutput{0, ""};
    }
    case Command::kStatus: {
      auto resp = client->Status();
      if (!resp.ok()) {
        return Fail(Unreachable(inv, resp.status(), kErrPluginNotAvailable), &inv);
      }
      if (!resp->ready()) {
        return Fail(CniError{kErrPluginNotAvailable, resp->message(), ""}, &inv);
      }
      return PluginOutput{0, ""};
    }
    case Command::kVersion:
      break;
  }
  return PluginOutput{0, VersionJson()};
}

}  // namespace fabric::cni
