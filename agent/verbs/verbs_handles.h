// RAII for libibverbs objects (through the dlopen seam, verbs_api.h), and
// libibverbs' two error conventions as absl::Status, in one place.
#ifndef FABRIC_AGENT_VERBS_VERBS_HANDLES_H_
#define FABRIC_AGENT_VERBS_VERBS_HANDLES_H_

#include <cerrno>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "agent/verbs/verbs_api.h"

namespace fabric::verbs {

// libibverbs either returns the errno (int calls: 0 or a positive code, some
// providers a negative one) or returns nullptr and sets errno (constructors).
// `ret` is the int result, or -1 with errno set for a nullptr (so -1 always
// means "see errno", never -EPERM); `op` names the call ("ibv_reg_mr"). The
// status carries the errno's name and text.
absl::Status VerbsError(int ret, absl::string_view op);
// The errno a VerbsError came from (0 for OK): what a verdict is keyed on.
int VerbsErrno(int ret);

struct DeviceListFree {
  void operator()(ibv_device** l) const { FreeDeviceList(l); }
};
struct ContextClose {
  void operator()(ibv_context* c) const { (void)CloseDevice(c); }
};
struct PdDealloc {
  void operator()(ibv_pd* p) const { (void)DeallocPd(p); }
};
struct MrDereg {
  void operator()(ibv_mr* m) const { (void)DeregMr(m); }
};
struct CqDestroy {
  void operator()(ibv_cq* c) const { (void)DestroyCq(c); }
};
struct QpDestroy {
  void operator()(ibv_qp* q) const { (void)DestroyQp(q); }
};

using DeviceListPtr = std::unique_ptr<ibv_device*, DeviceListFree>;
using ContextPtr = std::unique_ptr<ibv_context, ContextClose>;
using PdPtr = std::unique_ptr<ibv_pd, PdDealloc>;
using MrPtr = std::unique_ptr<ibv_mr, MrDereg>;
using CqPtr = std::unique_ptr<ibv_cq, CqDestroy>;
using QpPtr = std::unique_ptr<ibv_qp, QpDestroy>;

}  // namespace fabric::verbs

#endif  // FABRIC_AGENT_VERBS_VERBS_HANDLES_H_
