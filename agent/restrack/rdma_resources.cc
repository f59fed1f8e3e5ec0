#include "agent/restrack/rdma_resources.h"

#include "absl/strings/str_cat.h"

namespace fabric::restrack {

const char* ResourceKindName(ResourceKind kind) {
  switch (kind) {
    case ResourceKind::kQp:
      return "qp";
    case ResourceKind::kCq:
      return "cq";
    case ResourceKind::kMr:
      return "mr";
    case ResourceKind::kPd:
      return "pd";
    case ResourceKind::kCtx:
      return "ctx";
  }
  return "?";
}

std::string QpStateName(uint8_t state) {
  static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  if (state < sizeof(kNames) / sizeof(kNames[0])) return kNames[state];
  return absl::StrCat("state ", state);
}

bool QpCanMoveBytes(const RdmaResource& qp) {
  if (!qp.qp_state) return true;
  switch (*qp.qp_state) {
    case kQpStateRtr:
    case kQpStateRts:
    case kQpStateSqd:
    case kQpStateSqe:
      return true;
    default:
      return false;
  }
}

bool IsStackInternalQp(const RdmaResource& qp) {
  if (qp.kern_name.empty()) return false;  // a user's QP
  if (qp.qp_type && (*qp.qp_type == kQpTypeSmi || *qp.qp_type == kQpTypeGsi)) return true;
  // ib_core creates only the MAD QPs; mlx5_ib's own is its UMR QP (whose
  // type, MLX5_IB_QPT_REG_UMR, does not fit the reply's u8).
  return qp.kern_name == "ib_core" || qp.kern_name == "mlx5_ib";
}

}  // namespace fabric::restrack
