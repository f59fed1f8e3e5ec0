// `fabricctl check` stages 1-6: what an engine does with each device it can
// see, through libibverbs (agent/verbs). The facts are collected by
// check_verbs.cc; StagesOf() turns them into the six stage results (pure),
// which the verdict, the JSON and the text all read.
//   1 open      our open(2) of the verbs node (the real errno), then ibv_open_device
//   2 port      ibv_query_port: state, link layer, active MTU
//   3 gid       the GID table with types; the RoCE v2 IPv4 index against
//               MC_GID_INDEX / NCCL_IB_GID_INDEX when they are set (-1, the
//               engines' own selection, is accepted; EFA uses neither)
//   4 mr        ibv_alloc_pd + ibv_reg_mr of --mr-size (memlock)
//   5 qp        ibv_create_cq + a QP: RC (IB, RoCE) or SRD through efadv (EFA)
//   6 loopback  RC only: the QP connected to a second QP on the same port,
//               an RDMA write and a send, checked byte for byte
#ifndef FABRIC_TOOLS_FABRICCTL_CHECK_STAGES_H_
#define FABRIC_TOOLS_FABRICCTL_CHECK_STAGES_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/model/device.h"

namespace fabric::fabricctl {

// "EACCES (Permission denied)"; "" for 0.
std::string ErrnoString(int err);

enum class StageStatus { kOk, kFailed, kSkipped };
std::string StageStatusName(StageStatus s);  // "ok" | "failed" | "skipped"

// What one call (or sequence) of a stage did.
struct StageOutcome {
  StageStatus status = StageStatus::kSkipped;
  int err = 0;         // errno of the failing call, 0 if none or not an errno
  std::string detail;  // what failed, or why skipped ("" when ok)
};

struct PortFacts {
  int number = 0;
  std::string state;       // "ACTIVE", "DOWN", ...
  std::string link_layer;  // "InfiniBand" | "Ethernet" | "Unspecified"
  int active_mtu = 0;      // bytes
  uint16_t lid = 0;
  int gid_table_len = 0;
  bool active = false;
};

// One device the container can see (a uverbs node with its ibdev).
struct FabricDeviceFacts {
  std::string ibdev;
  std::string node;  // "infiniband/uverbs0"
  bool efa = false;
  StageOutcome open;           // 1: open(2) errno first, then libibverbs
  bool verbs_missing = false;  // stage 1 failed in libibverbs itself (not loadable, not listed)
  StageOutcome port;           // 2
  std::vector<PortFacts> ports;
  StageOutcome gid;  // 3: the table was read (the judgement is StagesOf's)
  int gid_port = 0;  // the port stages 3-6 use (the first)
  std::vector<GidEntry> gids;
  // The device's own netdevs as this container's sysfs shows them (the PCI
  // function's net/*, rxe's parent): a Pod's netns hides the host's, and
  // the default GID's netdev stands in (gid::FindRoceV2Ipv4).
  std::vector<std::string> netdevs;
  StageOutcome mr;  // 4
  uint64_t mr_bytes = 0;
  StageOutcome qp;      // 5
  std::string qp_type;  // "RC" | "SRD"
  uint32_t qpn = 0;
  StageOutcome loopback;        // 6
  int loopback_gid_index = -1;  // RoCE: the GID the loopback addressed; -1 on IB
  uint64_t loopback_bytes = 0;
  double loopback_seconds = 0;
};

// The engines' GID variables as this process sees them (unset: nullopt).
struct GidEnv {
  std::optional<std::string> mc_gid_index;
  std::optional<std::string> nccl_ib_gid_index;
};

// The memlock facts a stage-4 failure prints.
struct MemlockText {
  std::string soft, hard;  // "64 KiB", "unlimited"
  bool cap_ipc_lock = false;
};

// One stage as reported: 1..6, its name, the judged status and the one line
// of cause and remedy when it failed.
struct StageView {
  int number = 0;
  std::string name;  // "open" "port" "gid" "mr" "qp" "loopback"
  StageStatus status = StageStatus::kSkipped;
  std::string message;
  int err = 0;
};
std::vector<StageView> StagesOf(const FabricDeviceFacts& d, const GidEnv& env,
                                const MemlockText& memlock);

// One device for `-o json`: device, node, efa and its stages, each with
// stage, name, status, message, errno, error and the stage's own facts
// (ports; the GID table; bytes registered; QP type and number; the
// loopback's bytes, seconds and GID index).
nlohmann::ordered_json FabricDeviceJson(const FabricDeviceFacts& d, const GidEnv& env,
                                        const MemlockText& memlock);
// The devices' stages as text lines (after the node list).
std::string FabricText(const std::vector<FabricDeviceFacts>& devices, const std::string& skipped,
                       const GidEnv& env, const MemlockText& memlock);

// Stage 4 failed because pinning hit RLIMIT_MEMLOCK (ENOMEM; EAGAIN on some
// providers), not for another reason.
bool IsMemlockErrno(int err);

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_CHECK_STAGES_H_
