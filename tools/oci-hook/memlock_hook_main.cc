// fabric-memlock-hook --memlock=unlimited|<bytes>|<n>Ki/Mi/Gi [--best-effort]
// OCI hook: reads the container state JSON on stdin and raises the container
// process's RLIMIT_MEMLOCK. Exit 0 on success, 1 on failure (the runtime then
// fails the container, with our stderr line in its error), 2 on bad usage.
#include <unistd.h>

#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "tools/oci-hook/memlock_hook.h"

namespace {

constexpr size_t kMaxStateBytes = 1 << 20;
constexpr char kName[] = "fabric-memlock-hook";

void Usage() {
  std::cerr << "usage: " << kName
            << " [--memlock=unlimited|<bytes>|<n>Ki|<n>Mi|<n>Gi|<n>Ti] [--best-effort]\n"
               "OCI createRuntime/prestart hook: reads the container state on stdin and raises\n"
               "the container process's RLIMIT_MEMLOCK (soft and hard) to the value (default\n"
               "unlimited). Never lowers a limit. Raising the hard limit needs CAP_SYS_RESOURCE.\n"
               "--best-effort: if the hard limit cannot be raised, raise the soft limit as far\n"
               "as allowed and exit 0 instead of failing the container.\n";
}

}  // namespace

int main(int argc, char** argv) {
  using fabric::memlock_hook::ContainerState;
  using fabric::memlock_hook::HookResult;
  using fabric::memlock_hook::Options;
  using fabric::memlock_hook::ParseArgs;
  using fabric::memlock_hook::ParseState;
  using fabric::memlock_hook::RaiseMemlock;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    }
  }
  HookResult<Options> opts = ParseArgs(args);
  if (!opts.ok()) {
    std::cerr << kName << ": " << opts.error << "\n";
    Usage();
    return 2;
  }
  std::string input;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(STDIN_FILENO, buf, sizeof buf)) > 0) {
    input.append(buf, static_cast<size_t>(n));
    if (input.size() > kMaxStateBytes) {
      std::cerr << kName << ": container state on stdin exceeds 1 MiB\n";
      return 1;
    }
  }
  HookResult<ContainerState> state = ParseState(input);
  if (!state.ok()) {
    std::cerr << kName << ": " << state.error << "\n";
    return 1;
  }
  HookResult<std::string> done = RaiseMemlock(state.value->pid, *opts.value);
  if (!done.ok()) {
    std::cerr << kName << ": container " << state.value->id << ": " << done.error << "\n";
    return 1;
  }
  // runc discards hook output on success; this is for manual runs and logs.
  std::cerr << kName << ": container " << state.value->id << ": " << *done.value << "\n";
  return 0;
}
