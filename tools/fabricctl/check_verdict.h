// `fabricctl check`: the facts collected inside a Pod and the verdict over
// them. Decide() and the renderers are pure (no I/O); collection lives in
// check_collect.h so the verdict logic is tested over every combination.
#ifndef FABRIC_TOOLS_FABRICCTL_CHECK_VERDICT_H_
#define FABRIC_TOOLS_FABRICCTL_CHECK_VERDICT_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/fabricctl/check_stages.h"
#include "tools/fabricctl/cli_args.h"

namespace fabric::fabricctl {

enum class NodeKind { kUverbs, kRdmaCm, kUmad, kIssm };
std::string NodeKindName(NodeKind k);  // "uverbs" | "rdma_cm" | "umad" | "issm"

// One device node found under <dev-root>/infiniband.
struct DeviceNodeFacts {
  std::string rel_path;  // "infiniband/uverbs0"
  std::string path;      // as opened: "<dev-root>/infiniband/uverbs0"
  NodeKind kind = NodeKind::kUverbs;
  bool is_char_device = false;    // false for the regular files of fake trees
  uint32_t major = 0, minor = 0;  // from st_rdev when is_char_device
  bool probed = false;            // open() attempted (never for issm)
  int open_errno = 0;             // 0: open(O_RDWR) succeeded (when probed)
  std::string ibdev;              // from sysfs, "" when unknown
  // `dev` in sysfs for this node; a node whose numbers differ is one libibverbs
  // refuses after open (fstat rdev check), see fabric-facts §2.1 step 6.
  std::optional<std::pair<uint32_t, uint32_t>> sysfs_dev;
  bool opened() const { return probed && open_errno == 0; }
};

struct MemlockFacts {
  std::optional<uint64_t> soft;  // nullopt: RLIM_INFINITY
  std::optional<uint64_t> hard;
  bool cap_ipc_lock = false;  // effective CAP_IPC_LOCK: pinning ignores the limit
};

struct ProviderFacts {
  std::string provider;  // "tcp;ofi_rxm"
  std::string fabric;    // "127.0.0.1/32"
  std::string domain;    // "lo", "rdmap79s0-rdm"
  bool operator==(const ProviderFacts&) const = default;
};

struct CheckFacts {
  std::string dev_root;
  std::vector<DeviceNodeFacts> nodes;
  MemlockFacts memlock;
  std::vector<ProviderFacts> providers;  // deduplicated
  std::string provider_error;            // fi_getinfo failure text, "" if none
  // Stages 1-6 per uverbs node (check_verbs.h), and why 2-6 did not run at all.
  std::vector<FabricDeviceFacts> fabric;
  std::string fabric_skipped;
  GidEnv gid_env;
};

struct CheckPolicy {
  std::optional<std::string> required_provider;
  // Stage 4 registers this much; where no device reaches stage 4 the soft
  // RLIMIT_MEMLOCK is compared with it instead.
  uint64_t mr_size = kDefaultMrSize;
};

// In precedence order (Decide). The stage verdicts follow stage order.
enum class Verdict {
  kOk,
  kNotGranted,
  kOpenFailed,
  kNoDevices,
  kProviderMissing,
  kMemlockTooLow,
  kVerbsUnavailable,
  kPortDown,
  kGidMismatch,
  kMrFailed,
  kQpFailed,
  kLoopbackFailed,
};
std::string VerdictName(Verdict v);  // "ok", "not-granted", ...
int VerdictExitCode(Verdict v);

struct Finding {
  Verdict verdict;
  std::string message;      // one line, says what to fix
  std::string device = {};  // the stage finding's device ("" for node-wide ones)
  int stage = 0;            // 1-6 for a stage finding
};

struct CheckReport {
  Verdict verdict = Verdict::kOk;
  std::string summary;            // one line: "<verdict>: <message>"
  std::vector<Finding> findings;  // every problem that applies, in precedence order
};

// "tcp;ofi_rxm" -> "tcp": libfabric names layered providers "<core>;<utility>".
std::string CoreProviderName(const std::string& provider);
// True if `offered` (a full provider name) satisfies the `requested` name:
// same full name, or same core name ("tcp" is satisfied by "tcp;ofi_rxm").
bool ProviderSatisfies(const std::string& requested, const std::string& offered);

// The verdict. Pure; precedence explained in check_verdict.cc.
CheckReport Decide(const CheckFacts& facts, const CheckPolicy& policy);

MemlockText MemlockTextOf(const MemlockFacts& m);

nlohmann::ordered_json CheckReportToJson(const CheckFacts& facts, const CheckPolicy& policy,
                                         const CheckReport& report);
std::string CheckReportToText(const CheckFacts& facts, const CheckPolicy& policy,
                              const CheckReport& report);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_CHECK_VERDICT_H_
