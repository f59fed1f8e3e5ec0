// fabricctl: the operator's CLI. See UsageText() (fabricctl --help) and README.md.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "agent/base/json_text.h"
#include "tools/fabricctl/bench.h"
#include "tools/fabricctl/check_collect.h"
#include "tools/fabricctl/check_verdict.h"
#include "tools/fabricctl/cli_args.h"
#include "tools/fabricctl/devices.h"
#include "tools/fabricctl/doctor_cmd.h"
#include "tools/fabricctl/observe.h"

namespace fabric::fabricctl {
namespace {

int RunCheck(const CheckOptions& o) {
  const CheckPolicy policy{o.provider, o.mr_size};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.wait_s);
  CheckFacts facts = CollectCheckFacts(o);
  CheckReport report = Decide(facts, policy);
  // --wait: an init container holds the Pod until the fabric works (the
  // device plugin's grant, the CDI hook, a GID that appears late) or gives up.
  while (report.verdict != Verdict::kOk && std::chrono::steady_clock::now() < deadline) {
    fmt::print(stderr, "fabricctl check: {}; retrying\n", report.summary);
    std::this_thread::sleep_for(std::min<std::chrono::duration<double>>(
        std::chrono::seconds(1), deadline - std::chrono::steady_clock::now()));
    facts = CollectCheckFacts(o);
    report = Decide(facts, policy);
  }
  if (o.format == OutputFormat::kJson) {
    fmt::print("{}\n", DumpJson(CheckReportToJson(facts, policy, report), 2));
  } else {
    fmt::print("{}", CheckReportToText(facts, policy, report));
  }
  return VerdictExitCode(report.verdict);
}

int RunObserveCommand(ObserveOptions o) {
  ApplyObserveEnvironment(o, [](const char* name) -> const char* { return std::getenv(name); });
  std::string out, err;
  const int code = RunObserve(o, &out, &err);
  fmt::print("{}", out);
  fmt::print(stderr, "{}", err);
  return code;
}

int Main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto cmd = ParseCommandLine(args);
  if (!cmd.ok()) {
    fmt::print(stderr, "fabricctl: {}\n", std::string(cmd.status().message()));
    return kExitUsage;
  }
  switch (cmd->kind) {
    case Command::Kind::kHelp:
      fmt::print("{}", UsageText());
      return kExitOk;
    case Command::Kind::kCheck:
      return RunCheck(cmd->check);
    case Command::Kind::kBench:
      return RunBench(cmd->bench);
    case Command::Kind::kDevices:
      return RunDevices(cmd->devices);
    case Command::Kind::kDoctor:
      return RunDoctor(cmd->doctor);
    case Command::Kind::kObserve:
      return RunObserveCommand(cmd->observe);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace fabric::fabricctl

int main(int argc, char** argv) { return fabric::fabricctl::Main(argc, argv); }
