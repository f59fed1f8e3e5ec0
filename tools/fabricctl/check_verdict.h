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
};

struct CheckPolicy {
  std::optional<std::string> required_provider;
  uint64_t min_memlock = kDefaultMinMemlock;
};

enum class Verdict { kOk, kNotGranted, kOpenFailed, kNoDevices, kProviderMissing, kMemlockTooLow };
std::string VerdictName(Verdict v);  // "ok", "not-granted", ...
int VerdictExitCode(Verdict v);

struct Finding {
  Verdict verdict;
  std::string message;  // one line, says what to fix
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

// "EACCES (Permission denied)"; "" for 0.
std::string ErrnoString(int err);

nlohmann::ordered_json CheckReportToJson(const CheckFacts& facts, const CheckPolicy& policy,
                                         const CheckReport& report);
std::string CheckReportToText(const CheckFacts& facts, const CheckPolicy& policy,
                              const CheckReport& report);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_CHECK_VERDICT_H_
