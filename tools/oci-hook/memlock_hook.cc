#include "tools/oci-hook/memlock_hook.h"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/base/memlock_limit.h"

namespace fabric::memlock_hook {
namespace {

constexpr int kCapSysResource = 24;  // linux/capability.h

std::string ErrnoText(int e) { return std::string(std::strerror(e)); }

}  // namespace

HookResult<rlim_t> ParseMemlock(const std::string& text) {
  rlim_t v = 0;
  std::string error;
  if (!ParseMemlockLimit(text, &v, &error)) return HookResult<rlim_t>::Err(error);
  return HookResult<rlim_t>::Ok(v);
}

HookResult<Options> ParseArgs(const std::vector<std::string>& args) {
  using R = HookResult<Options>;
  Options opts;
  for (const std::string& a : args) {
    if (a.rfind("--memlock=", 0) == 0) {
      HookResult<rlim_t> v = ParseMemlock(a.substr(strlen("--memlock=")));
      if (!v.ok()) return R::Err(v.error);
      opts.memlock = *v.value;
    } else if (a == "--best-effort") {
      opts.best_effort = true;
    } else {
      return R::Err("unknown argument \"" + a + "\"");
    }
  }
  return R::Ok(opts);
}

HookResult<ContainerState> ParseState(const std::string& json_text) {
  using R = HookResult<ContainerState>;
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return R::Err("container state on stdin is not a JSON object");
  }
  ContainerState st;
  if (j.contains("id") && j["id"].is_string()) st.id = j["id"].get<std::string>();
  if (j.contains("status") && j["status"].is_string()) st.status = j["status"].get<std::string>();
  if (!j.contains("pid") || !j["pid"].is_number_integer()) {
    return R::Err("container state has no integer \"pid\" (status \"" + st.status +
                  "\"); the hook must run as createRuntime or prestart");
  }
  int64_t pid = j["pid"].get<int64_t>();
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) {
    return R::Err("container state has invalid pid " + std::to_string(pid) + " (status \"" +
                  st.status + "\")");
  }
  st.pid = static_cast<pid_t>(pid);
  return R::Ok(st);
}

std::string FormatLimit(rlim_t v) {
  if (v == RLIM_INFINITY) return "unlimited";
  static const char* kSuffix[] = {"Ti", "Gi", "Mi", "Ki"};
  static const int kShift[] = {40, 30, 20, 10};
  for (int i = 0; i < 4; ++i) {
    rlim_t unit = rlim_t{1} << kShift[i];
    if (v != 0 && v % unit == 0) return std::to_string(v / unit) + kSuffix[i];
  }
  return std::to_string(v);
}

struct rlimit TargetLimits(const struct rlimit& current, rlim_t want) {
  // RLIM_INFINITY is the largest rlim_t, so max() orders "unlimited" correctly.
  struct rlimit t;
  t.rlim_cur = std::max(current.rlim_cur, want);
  t.rlim_max = std::max(current.rlim_max, want);
  return t;
}

bool HaveCapSysResource() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    std::istringstream hex(line.substr(7));
    uint64_t caps = 0;
    hex >> std::hex >> caps;
    return (caps >> kCapSysResource) & 1;
  }
  return false;
}

HookResult<std::string> RaiseMemlock(pid_t pid, const Options& opts) {
  using R = HookResult<std::string>;
  const std::string who = "RLIMIT_MEMLOCK of container pid " + std::to_string(pid);
  struct rlimit cur;
  if (::prlimit(pid, RLIMIT_MEMLOCK, nullptr, &cur) != 0) {
    int e = errno;
    return R::Err("reading " + who + ": " + ErrnoText(e));
  }
  const std::string cur_text = FormatLimit(cur.rlim_cur) + ":" + FormatLimit(cur.rlim_max);
  struct rlimit want = TargetLimits(cur, opts.memlock);
  if (want.rlim_cur == cur.rlim_cur && want.rlim_max == cur.rlim_max) {
    return R::Ok(who + " already " + cur_text);
  }
  const std::string want_text = FormatLimit(want.rlim_cur) + ":" + FormatLimit(want.rlim_max);
  if (::prlimit(pid, RLIMIT_MEMLOCK, &want, nullptr) == 0) {
    return R::Ok(who + " raised from " + cur_text + " to " + want_text);
  }
  int e = errno;
  std::string err =
      "raising " + who + " from " + cur_text + " to " + want_text + ": " + ErrnoText(e);
  if (e == EPERM && want.rlim_max > cur.rlim_max && !HaveCapSysResource()) {
    err +=
        " (raising the hard limit needs CAP_SYS_RESOURCE, which the container runtime running "
        "this hook lacks; give the runtime that capability, set LimitMEMLOCK=infinity on its "
        "service, or use --memlock <= " +
        FormatLimit(cur.rlim_max) + ")";
  }
  if (!opts.best_effort) return R::Err(err);
  // Best effort: raise the soft limit up to the hard one, which needs no privilege.
  struct rlimit soft_only = cur;
  soft_only.rlim_cur = std::min(want.rlim_cur, cur.rlim_max);
  if (soft_only.rlim_cur != cur.rlim_cur &&
      ::prlimit(pid, RLIMIT_MEMLOCK, &soft_only, nullptr) != 0) {
    int e2 = errno;
    return R::Err(err + "; raising only the soft limit also failed: " + ErrnoText(e2));
  }
  return R::Ok(err + "; best effort: soft limit now " + FormatLimit(soft_only.rlim_cur));
}

}  // namespace fabric::memlock_hook
