// RAII for libfabric handles: every fid is owned by a FidPtr (closed with
// fi_close) and every fi_info list by an InfoPtr (fi_freeinfo). The
// definitions live in agent/libfabric/fi_handles.h, shared with the doctor.
#ifndef FABRIC_TOOLS_FABRICCTL_FID_H_
#define FABRIC_TOOLS_FABRICCTL_FID_H_

#include "agent/libfabric/fi_handles.h"

namespace fabric::fabricctl {

using fi::FidCloser;
using fi::FidPtr;
using fi::InfoFreer;
using fi::InfoPtr;
using fi::kFabricApiVersion;

}  // namespace fabric::fabricctl

#endif  // FABRIC_TOOLS_FABRICCTL_FID_H_
