#include "agent/daemon/agent_runner.h"

#include <signal.h>
#include <time.h>

#include <cerrno>

#include "absl/time/clock.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"

namespace fabric {
namespace {

// The config file's content, for change detection (ConfigMap updates swap a
// symlink, so mtime of the path alone is not reliable).
std::string ConfigFingerprint(const std::string& path) {
  auto content = ReadFile(path);
  return content.ok() ? *content : std::string("\x01missing");
}

}  // namespace

int RunAgent(const AgentOptions& options) {
  // Signals are taken synchronously by this thread; block them before any
  // other thread starts so they inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  Agent agent(options);
  if (absl::Status s = agent.Start(); !s.ok()) {
    LogError(Component::kAgent, "cannot start: {}", s.message());
    agent.Stop();
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  LogInfo(Component::kAgent, "running");

  std::string fingerprint =
      options.config_path.empty() ? "" : ConfigFingerprint(options.config_path);
  while (true) {
    struct timespec timeout = {2, 0};
    int sig = sigtimedwait(&set, nullptr, &timeout);
    if (sig == SIGTERM || sig == SIGINT) {
      LogInfo(Component::kAgent, "signal {}: stopping", sig);
      break;
    }
    bool reload = sig == SIGHUP;
    if (!options.config_path.empty()) {
      std::string now = ConfigFingerprint(options.config_path);
      if (now != fingerprint) {
        // An editor may be mid-write: reload only once the content settled.
        absl::SleepFor(absl::Milliseconds(200));
        if (ConfigFingerprint(options.config_path) == now) {
          fingerprint = now;
          reload = true;
        }
      }
    }
    if (reload) {
      if (!options.config_path.empty()) fingerprint = ConfigFingerprint(options.config_path);
      (void)agent.Reload();
    }
  }
  agent.Stop();
  LogInfo(Component::kAgent, "stopped");
  return 0;
}

}  // namespace fabric
