// `fabricctl bench`: libfabric FI_EP_RDM RMA bandwidth (fi_writemsg, then
// fi_read) between two processes, with a guard that refuses to report numbers
// when libfabric opened another provider than the one asked for.
#ifndef FABRIC_TOOLS_FABRICCTL_BENCH_H_
#define FABRIC_TOOLS_FABRICCTL_BENCH_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/fabricctl/cli_args.h"

namespace fabric::fabricctl {

struct PhaseResult {
  uint64_t bytes = 0;
  uint64_t ops = 0;
  double seconds = 0;
  double GBytesPerSecond() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

struct BenchResult {
  std::string provider_requested;
  std::string provider;  // opened, full name ("tcp;ofi_rxm")
  std::string fabric;
  std::string domain;
  std::string peer_provider;
  std::string peer_domain;
  std::vector<std::string> mr_mode;  // bits the provider asked for
  uint64_t size = 0;
  uint32_t batch = 0;
  uint32_t threads = 0;
  double duration_s = 0;
  PhaseResult write;
  PhaseResult read;
};

// The silent-fallback guard. The provider is the core name before ';' (tcp
// opens as "tcp;ofi_rxm" for FI_EP_RDM); kFailedPrecondition when `opened`
// does not satisfy `requested`, with a message that says so.
absl::Status CheckOpenedProvider(const std::string& requested, const std::string& opened);

// Providers whose endpoints are bound to an IP address: for these the bench
// binds its endpoint to the address the control connection uses, so that a
// cross-host run uses the interface the peer is reachable on.
bool ProviderUsesIpAddressing(const std::string& core_provider);

// Names of the FI_MR_* bits set in `mr_mode` ("FI_MR_LOCAL", ...).
std::vector<std::string> MrModeNames(int mr_mode);

nlohmann::ordered_json BenchResultToJson(const BenchResult& r);
std::string BenchResultToText(const BenchResult& r);

// Runs the whole subcommand (text/json to stdout, provider line first,
// progress and errors to stderr) and returns the process exit code.
int RunBench(const BenchOptions& options);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_BENCH_H_
