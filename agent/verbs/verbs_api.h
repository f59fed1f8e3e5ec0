// libibverbs' (and libefa's) exported entry points, loaded with dlopen on
// first use, as agent/libfabric does for libfabric: nothing links them, so a
// binary that never opens a device (fabricctl on a host or in an image
// without rdma-core) still starts. The data path (ibv_post_send,
// ibv_post_recv, ibv_poll_cq) is inline in <infiniband/verbs.h> and
// dispatches through the context's ops, so it needs no symbol; never call
// another inline helper of verbs.h that names an exported function (the
// link would fail, which is the guard): use these.
//
// Each symbol is bound with dlvsym at the version a direct link against
// Debian 12's rdma-core 44 headers binds (IBVERBS_1.1 / 1.8 / 1.11, EFA_1.1).
#ifndef FABRIC_AGENT_VERBS_VERBS_API_H_
#define FABRIC_AGENT_VERBS_VERBS_API_H_

#include <infiniband/efadv.h>
#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace fabric::verbs {

// Loads libibverbs.so.1 once (thread-safe) and binds its entry points. The
// error names the library and dlerror(). Before a successful Load() every
// call below fails as libibverbs does without devices (nullptr/ENOSYS).
absl::Status Load();
// libefa.so.1 (EFA's direct verbs: SRD QPs), loaded separately: only EFA
// devices need it.
absl::Status LoadEfa();

ibv_device** GetDeviceList(int* num_devices);
void FreeDeviceList(ibv_device** list);
const char* GetDeviceName(ibv_device* device);
ibv_context* OpenDevice(ibv_device* device);
int CloseDevice(ibv_context* context);
int QueryDevice(ibv_context* context, ibv_device_attr* attr);
// As verbs.h's ibv_query_port (the extended op when the provider has it).
int QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr);
// Every valid GID entry of every port (rdma-core >= 32).
ssize_t QueryGidTable(ibv_context* context, ibv_gid_entry* entries, size_t max_entries);
ibv_pd* AllocPd(ibv_context* context);
int DeallocPd(ibv_pd* pd);
ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access);
int DeregMr(ibv_mr* mr);
ibv_cq* CreateCq(ibv_context* context, int cqe);
int DestroyCq(ibv_cq* cq);
ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr);
int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask);
int DestroyQp(ibv_qp* qp);
const char* WcStatusStr(ibv_wc_status status);
// efadv_create_qp_ex (after LoadEfa).
ibv_qp* EfaCreateQpEx(ibv_context* context, ibv_qp_init_attr_ex* attr,
                      efadv_qp_init_attr* efa_attr);

}  // namespace fabric::verbs

#endif  // FABRIC_AGENT_VERBS_VERBS_API_H_
