// libfabric's exported entry points, loaded with dlopen on first use.
//
// Why not link it: libfabric.so.1 maps a dozen provider libraries (psm2,
// verbs, rdmacm, libnl, ...) at load time, about 1.35 MiB of RSS, into every
// process that links it, even when no fabric endpoint is ever opened. The
// agent opens endpoints only with --doctor, and `fabricctl devices` never
// does. Everything else of libfabric's API (fi_domain, fi_endpoint, fi_send,
// fi_cq_read, fi_close, ...) is inline and dispatches through the ops tables
// of objects these functions return, so these six are the whole link surface.
//
// Each symbol is bound with dlvsym at the version our headers were written for
// (Debian 12's libfabric 1.17), which is what a direct link would have bound.
#ifndef FABRIC_AGENT_LIBFABRIC_LIBFABRIC_API_H_
#define FABRIC_AGENT_LIBFABRIC_LIBFABRIC_API_H_

#include <rdma/fabric.h>

#include <cstdint>

#include "absl/status/status.h"

namespace fabric::fi {

// Loads libfabric.so.1 once (thread-safe) and binds its entry points. The
// error names the library and dlerror(); callers return it before their first
// GetInfo so that a host without libfabric gets that message, not ENOSYS.
absl::Status Load();

// The libfabric functions of the same name. Before a successful Load() they
// fail as libfabric would with no provider: GetInfo and Fabric return
// -FI_ENOSYS, DupInfo/AllocInfo return nullptr, FreeInfo does nothing.
int GetInfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info);
fi_info* DupInfo(const fi_info* info);
inline fi_info* AllocInfo() { return DupInfo(nullptr); }  // as fi_allocinfo()
void FreeInfo(fi_info* info);
int Fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context);
// fi_strerror for a positive FI_E* code; a fixed text before Load().
const char* StrError(int errnum);

}  // namespace fabric::fi

#endif  // FABRIC_AGENT_LIBFABRIC_LIBFABRIC_API_H_
