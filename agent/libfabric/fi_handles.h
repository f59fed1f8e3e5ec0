// RAII for libfabric handles, shared by fabricctl (check/bench) and the
// doctor: every fid is owned by a FidPtr (closed with fi_close) and every
// fi_info list by an InfoPtr (fi::FreeInfo).
#ifndef FABRIC_AGENT_LIBFABRIC_FI_HANDLES_H_
#define FABRIC_AGENT_LIBFABRIC_FI_HANDLES_H_

#include <rdma/fabric.h>

#include <cstdint>
#include <memory>
#include <string>

#include "agent/libfabric/libfabric_api.h"

namespace fabric::fi {

struct FidCloser {
  template <typename T>
  void operator()(T* object) const {
    // fid_fabric, fid_domain, fid_ep, ... all start with `struct fid fid`.
    if (object != nullptr) fi_close(&object->fid);
  }
};
template <typename T>
using FidPtr = std::unique_ptr<T, FidCloser>;

struct InfoFreer {
  void operator()(fi_info* info) const { FreeInfo(info); }
};
using InfoPtr = std::unique_ptr<fi_info, InfoFreer>;

// The API version we ask for: Debian 12 ships libfabric 1.17, which answers
// FI_VERSION(1,18) with -FI_ENOSYS.
inline constexpr uint32_t kFabricApiVersion = FI_VERSION(1, 17);

}  // namespace fabric::fi

#endif  // FABRIC_AGENT_LIBFABRIC_FI_HANDLES_H_
