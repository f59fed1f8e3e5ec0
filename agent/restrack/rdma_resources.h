// The kernel's RDMA resource tracking (restrack): which QPs, CQs, MRs, PDs and
// device contexts exist on each device, and which process owns each. The same
// data `rdma resource show` prints, read from the
// RDMA_NLDEV_CMD_RES_{QP,CQ,MR,PD,CTX}_GET netlink dumps (one dump per device
// and kind; drivers/infiniband/core/nldev.c).
//
// What the kernel shows, and to whom (Linux 5.5+, measured on 6.1 in the
// soft-RoCE VM): every QP/CQ/MR/PD of every device visible from the reader's
// network namespace (all of them in the default `rdma system` shared mode),
// whatever the reader's PID namespace. A user resource carries its owner's PID
// as seen from the reader's PID namespace, and none when the owner is not
// visible there or has exited (pid 0, empty kern_name); a kernel-owned one
// carries kern_name ("ib_core"). So attributing Pods' resources needs the host
// PID namespace (hostPID) and no capability (an uid-65534 reader without
// capabilities gets the same PIDs); CAP_NET_ADMIN only adds keys (MR
// rkey/lkey, PD local_dma_lkey), not read here. Older kernels filtered by PID
// namespace (4.16-5.2: only the reader's own; 5.3-5.4: only owners it sees).
//
// The owner is the *thread* that created the resource (its task): when that
// thread has exited, the resource is dumped without a PID. A user resource
// also names what it was made in (Linux 5.1+): a QP or MR its protection
// domain (pdn), a PD or CQ its device context (ctxn); the context, made when
// the process opened the device, is dumped since Linux 5.14 ("RDMA/nldev:
// Return context information", 2021). Their owners stand in for an owner that
// is gone (agent/sampler).
#ifndef FABRIC_AGENT_RESTRACK_RDMA_RESOURCES_H_
#define FABRIC_AGENT_RESTRACK_RDMA_RESOURCES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fabric::restrack {

enum class ResourceKind { kQp, kCq, kMr, kPd, kCtx };
// "qp" | "cq" | "mr" | "pd" | "ctx"
const char* ResourceKindName(ResourceKind kind);

struct RdmaResource {
  ResourceKind kind = ResourceKind::kQp;
  std::string device;  // RDMA device name (RDMA_NLDEV_ATTR_DEV_NAME)
  uint32_t port = 0;   // QPs bound to a port; 0 otherwise
  uint32_t id = 0;     // lqpn / cqn / mrn / pdn / ctxn (0 before Linux 5.1 for CQ/MR/PD)
  // The owner: a PID as seen from the reader's PID namespace, or 0 for a
  // kernel-owned resource, which then has kern_name ("ib_core", "rdma_cm").
  // pid 0 with an empty kern_name: a user resource whose owner is not visible
  // from the reader's PID namespace, or has exited.
  uint32_t pid = 0;
  std::string kern_name;
  uint64_t mr_bytes = 0;  // MRs: RDMA_NLDEV_ATTR_RES_MRLEN
  // QPs: the kernel's enum ib_qp_type and ib_qp_state (RDMA_NLDEV_ATTR_RES_TYPE
  // and _STATE, from ib_query_qp at dump time); nullopt where the reply has none.
  std::optional<uint8_t> qp_type, qp_state;
  // What a user resource was made in, on the same device: a QP's or MR's
  // protection domain (RDMA_NLDEV_ATTR_RES_PDN), a PD's or CQ's device context
  // (RDMA_NLDEV_ATTR_RES_CTXN). nullopt where the reply has none (kernel
  // resources, Linux before 5.1).
  std::optional<uint32_t> pdn, ctxn;
  bool operator==(const RdmaResource&) const = default;
};

// The kernel's values (include/rdma/ib_verbs.h), a stable ABI.
inline constexpr uint8_t kQpTypeSmi = 0, kQpTypeGsi = 1;
inline constexpr uint8_t kQpStateReset = 0, kQpStateInit = 1, kQpStateRtr = 2, kQpStateRts = 3,
                         kQpStateSqd = 4, kQpStateSqe = 5, kQpStateErr = 6;
// "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"; "state N" otherwise.
std::string QpStateName(uint8_t state);

// Whether a QP can move bytes on the wire: ready to receive or to send (RTR,
// RTS, SQD, SQE). A QP in RESET or INIT was never connected: libfabric 1.17's
// verbs provider creates and destroys one per device in fi_getinfo() to learn
// its limits (vrb_get_qp_cap), so any process that merely lists providers
// owns such a QP for a moment. One in ERR moves nothing any more. A QP whose
// state the reply did not give counts (every kernel since 4.16 gives it).
bool QpCanMoveBytes(const RdmaResource& qp);

// QPs of the RDMA stack itself, which never carry a workload's bytes: the
// management QPs every port has (SMI QP0, GSI QP1: subnet management and
// connection-setup MADs; ib_core creates no other), and a driver's own work
// QPs (mlx5_ib's UMR QP posts memory registrations to the local HCA;
// kern_name is the module that called ib_create_qp). A kernel QP of any
// other owner (ib_ipoib; rdma_cm, which creates the QPs of NFS/RDMA, iSER,
// NVMe-oF and Lustre o2ib) is a user of the wire.
bool IsStackInternalQp(const RdmaResource& qp);

// What the last Dump() left out, for logs and metrics.
struct DumpNotes {
  // Entries dropped because a name in them (device, kern_name) was not clean
  // text (agent/base/utf8.h CheckExternalName).
  uint32_t rejected_entries = 0;
  // Devices that disappeared between the device list and their dumps; their
  // resources are not in the result.
  uint32_t vanished_devices = 0;
  // Dumps restarted (interrupted, receive buffer overrun, a transient error).
  uint32_t retried_dumps = 0;
  // Why device contexts were not dumped ("" when they were): the kernel has
  // no RDMA_NLDEV_CMD_RES_CTX_GET (before Linux 5.14). A resource whose
  // creating thread and PD's creator are both gone then has no owner.
  std::string contexts_missing;
  // Devices whose dumps the kernel refused (a driver whose ib_query_qp fails
  // while the device resets, or that cannot query a QP at all), with why.
  // Their resources are not in the result; every other device's are.
  std::map<std::string, std::string> failed_devices;
  // The first few reasons for rejections, already escaped (safe to log).
  std::vector<std::string> reasons;
};

// The host-access seam: the real one reads netlink, tests give fakes.
class ResourceSource {
 public:
  virtual ~ResourceSource() = default;
  // Every QP, CQ, MR, PD and device context the kernel shows this process,
  // on every device visible from its network namespace. An error names what
  // failed.
  virtual absl::StatusOr<std::vector<RdmaResource>> Dump() = 0;
  // What the last Dump() skipped; empty when it skipped nothing.
  virtual DumpNotes LastDumpNotes() const { return {}; }
};

// The real source (NETLINK_RDMA through libmnl), opened per Dump.
std::unique_ptr<ResourceSource> OpenNetlinkResourceSource();

}  // namespace fabric::restrack

#endif  // FABRIC_AGENT_RESTRACK_RDMA_RESOURCES_H_
