#include "agent/libfabric/libfabric_api.h"

#include <dlfcn.h>
#include <rdma/fi_errno.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace fabric::fi {
namespace {

constexpr char kLibrary[] = "libfabric.so.1";

struct Api {
  int (*getinfo)(uint32_t, const char*, const char*, uint64_t, const fi_info*, fi_info**) = nullptr;
  fi_info* (*dupinfo)(const fi_info*) = nullptr;
  void (*freeinfo)(fi_info*) = nullptr;
  int (*fabric)(fi_fabric_attr*, fid_fabric**, void*) = nullptr;
  const char* (*strerror)(int) = nullptr;
  absl::Status status;
};

// Binds `name` at `version` into *slot; false (status set) when missing.
template <typename Fn>
bool Bind(void* handle, const char* name, const char* version, Fn* slot, absl::Status* status) {
  *slot = reinterpret_cast<Fn>(dlvsym(handle, name, version));
  if (*slot != nullptr) return true;
  const char* why = dlerror();
  *status = absl::FailedPreconditionError(
      absl::StrCat(kLibrary, ": no symbol ", name, "@", version, ": ", why ? why : "not found"));
  return false;
}

Api LoadApi() {
  Api api;
  // RTLD_GLOBAL: libfabric dlopens its own provider plugins, which may resolve
  // core symbols through the global scope. Never closed: providers keep
  // threads and atexit handlers that live as long as the process.
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    api.status = absl::FailedPreconditionError(absl::StrCat(
        "libfabric is not installed or cannot be loaded (", why ? why : kLibrary, ")"));
    return api;
  }
  // The versions a direct link against libfabric 1.17's headers binds.
  Api bound;
  if (Bind(handle, "fi_getinfo", "FABRIC_1.3", &bound.getinfo, &api.status) &&
      Bind(handle, "fi_dupinfo", "FABRIC_1.3", &bound.dupinfo, &api.status) &&
      Bind(handle, "fi_freeinfo", "FABRIC_1.3", &bound.freeinfo, &api.status) &&
      Bind(handle, "fi_fabric", "FABRIC_1.1", &bound.fabric, &api.status) &&
      Bind(handle, "fi_strerror", "FABRIC_1.0", &bound.strerror, &api.status)) {
    return bound;
  }
  return api;
}

const Api& TheApi() {
  static const Api* api = new Api(LoadApi());  // never destroyed, like the handle
  return *api;
}

}  // namespace

absl::Status Load() { return TheApi().status; }

int GetInfo(uint32_t version, const char* node, const char* service, uint64_t flags,
            const fi_info* hints, fi_info** info) {
  const Api& api = TheApi();
  if (api.getinfo == nullptr) return -FI_ENOSYS;
  return api.getinfo(version, node, service, flags, hints, info);
}

fi_info* DupInfo(const fi_info* info) {
  const Api& api = TheApi();
  return api.dupinfo != nullptr ? api.dupinfo(info) : nullptr;
}

void FreeInfo(fi_info* info) {
  const Api& api = TheApi();
  if (api.freeinfo != nullptr && info != nullptr) api.freeinfo(info);
}

int Fabric(fi_fabric_attr* attr, fid_fabric** fabric, void* context) {
  const Api& api = TheApi();
  if (api.fabric == nullptr) return -FI_ENOSYS;
  return api.fabric(attr, fabric, context);
}

const char* StrError(int errnum) {
  const Api& api = TheApi();
  return api.strerror != nullptr ? api.strerror(errnum) : "libfabric not loaded";
}

}  // namespace fabric::fi
