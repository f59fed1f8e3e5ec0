#include "agent/daemon/agent_runner.h"

#include <signal.h>
#include <time.h>

#include <cerrno>
#include <optional>

#include "absl/time/clock.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "agent/daemon/serving_lock.h"

namespace fabric {
namespace {

// The config file's content, for change detection (ConfigMap updates swap a
// symlink, so mtime of the path alone is not reliable).
std::string ConfigFingerprint(const std::string& path) {
  auto content = ReadFile(path);
  return content.ok() ? *content : std::string("\x01missing");
}

// The file's fingerprint once two reads 200 ms apart agree (at most ~5 s).
std::string SettledFingerprint(const std::string& path) {
  std::string now = ConfigFingerprint(path);
  for (int i = 0; i < 25; ++i) {
    absl::SleepFor(absl::Milliseconds(200));
    std::string again = ConfigFingerprint(path);
    if (again == now) break;
    now = std::move(again);
  }
  return now;
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

  // One front per node (serving_lock.h): wait for the other one to go, as in a
  // DaemonSet rollout that starts the new Pod before the old one has exited.
  std::optional<ServingLock> lock;
  for (bool logged = false;;) {
    absl::StatusOr<ServingLock> got =
        ServingLock::TryAcquire(options.paths.PluginsRegistryDir(), options.front_name);
    if (got.ok()) {
      lock.emplace(std::move(*got));
      break;
    }
    if (!absl::IsUnavailable(got.status())) {
      // A folder we cannot write (read-only mount, permissions) costs the
      // guard, not the node's devices.
      LogWarn(Component::kAgent, "serving without the one-front-per-node lock: {}",
              got.status().message());
      break;
    }
    if (!logged) LogWarn(Component::kAgent, "waiting: {}", got.status().message());
    logged = true;
    struct timespec wait = {1, 0};
    const int sig = sigtimedwait(&set, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) return 0;
  }

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
    if (!options.config_path.empty() &&
        (reload || ConfigFingerprint(options.config_path) != fingerprint)) {
      // SIGHUP and a changed file alike: read the file once it settled. An
      // editor or `cp` may be mid-write, and an in-place write is briefly
      // empty, which would read as "the defaults".
      std::string now = SettledFingerprint(options.config_path);
      reload = reload || now != fingerprint;
      fingerprint = now;
    }
    if (reload) (void)agent.Reload();
  }
  agent.Stop();
  LogInfo(Component::kAgent, "stopped");
  return 0;
}

}  // namespace fabric
