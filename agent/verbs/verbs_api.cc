#include "agent/verbs/verbs_api.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fabric::verbs {
namespace {

constexpr char kVerbs[] = "libibverbs.so.1";
constexpr char kEfa[] = "libefa.so.1";

struct Api {
  ibv_device** (*get_device_list)(int*) = nullptr;
  void (*free_device_list)(ibv_device**) = nullptr;
  const char* (*get_device_name)(ibv_device*) = nullptr;
  ibv_context* (*open_device)(ibv_device*) = nullptr;
  int (*close_device)(ibv_context*) = nullptr;
  int (*query_device)(ibv_context*, ibv_device_attr*) = nullptr;
  int (*query_port)(ibv_context*, uint8_t, _compat_ibv_port_attr*) = nullptr;
  ssize_t (*query_gid_table)(ibv_context*, ibv_gid_entry*, size_t, uint32_t, size_t) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context*) = nullptr;
  int (*dealloc_pd)(ibv_pd*) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int) = nullptr;
  int (*dereg_mr)(ibv_mr*) = nullptr;
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int) = nullptr;
  int (*destroy_cq)(ibv_cq*) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*) = nullptr;
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int) = nullptr;
  int (*destroy_qp)(ibv_qp*) = nullptr;
  const char* (*wc_status_str)(ibv_wc_status) = nullptr;
  absl::Status status;
};

struct EfaApi {
  ibv_qp* (*create_qp_ex)(ibv_context*, ibv_qp_init_attr_ex*, efadv_qp_init_attr*,
                          uint32_t) = nullptr;
  absl::Status status;
};

// Binds `name` at `version` into *slot; false (status set) when missing.
template <typename Fn>
bool Bind(void* handle, const char* lib, const char* name, const char* version, Fn* slot,
          absl::Status* status) {
  *slot = reinterpret_cast<Fn>(dlvsym(handle, name, version));
  if (*slot != nullptr) return true;
  const char* why = dlerror();
  *status = absl::FailedPreconditionError(
      absl::StrCat(lib, ": no symbol ", name, "@", version, ": ", why ? why : "not found"));
  return false;
}

void* Open(const char* lib, absl::Status* status) {
  // Never closed: providers keep state for the life of the process.
  void* handle = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    *status = absl::FailedPreconditionError(
        absl::StrCat(lib, " is not installed or cannot be loaded (", why ? why : lib, ")"));
  }
  return handle;
}

Api LoadApi() {
  Api api;
  void* h = Open(kVerbs, &api.status);
  if (h == nullptr) return api;
  Api b;
  absl::Status* st = &api.status;
  const char* v11 = "IBVERBS_1.1";
  if (Bind(h, kVerbs, "ibv_get_device_list", v11, &b.get_device_list, st) &&
      Bind(h, kVerbs, "ibv_free_device_list", v11, &b.free_device_list, st) &&
      Bind(h, kVerbs, "ibv_get_device_name", v11, &b.get_device_name, st) &&
      Bind(h, kVerbs, "ibv_open_device", v11, &b.open_device, st) &&
      Bind(h, kVerbs, "ibv_close_device", v11, &b.close_device, st) &&
      Bind(h, kVerbs, "ibv_query_device", v11, &b.query_device, st) &&
      Bind(h, kVerbs, "ibv_query_port", v11, &b.query_port, st) &&
      Bind(h, kVerbs, "_ibv_query_gid_table", "IBVERBS_1.11", &b.query_gid_table, st) &&
      Bind(h, kVerbs, "ibv_alloc_pd", v11, &b.alloc_pd, st) &&
      Bind(h, kVerbs, "ibv_dealloc_pd", v11, &b.dealloc_pd, st) &&
      Bind(h, kVerbs, "ibv_reg_mr", v11, &b.reg_mr, st) &&
      Bind(h, kVerbs, "ibv_dereg_mr", v11, &b.dereg_mr, st) &&
      Bind(h, kVerbs, "ibv_create_cq", v11, &b.create_cq, st) &&
      Bind(h, kVerbs, "ibv_destroy_cq", v11, &b.destroy_cq, st) &&
      Bind(h, kVerbs, "ibv_create_qp", v11, &b.create_qp, st) &&
      Bind(h, kVerbs, "ibv_modify_qp", v11, &b.modify_qp, st) &&
      Bind(h, kVerbs, "ibv_destroy_qp", v11, &b.destroy_qp, st) &&
      Bind(h, kVerbs, "ibv_wc_status_str", v11, &b.wc_status_str, st)) {
    return b;
  }
  return api;
}

EfaApi LoadEfaApi() {
  EfaApi api;
  void* h = Open(kEfa, &api.status);
  if (h == nullptr) return api;
  EfaApi b;
  if (Bind(h, kEfa, "efadv_create_qp_ex", "EFA_1.1", &b.create_qp_ex, &api.status)) return b;
  return api;
}

const Api& TheApi() {
  static const Api* api = new Api(LoadApi());  // never destroyed, like the handle
  return *api;
}

const EfaApi& TheEfaApi() {
  static const EfaApi* api = new EfaApi(LoadEfaApi());
  return *api;
}

// Pointer-returning calls set errno; int-returning ones return it.
template <typename T>
T* NoLibrary() {
  errno = ENOSYS;
  return nullptr;
}

}  // namespace

absl::Status Load() { return TheApi().status; }
absl::Status LoadEfa() { return TheEfaApi().status; }

ibv_device** GetDeviceList(int* n) {
  const Api& a = TheApi();
  if (a.get_device_list == nullptr) return NoLibrary<ibv_device*>();
  return a.get_device_list(n);
}

void FreeDeviceList(ibv_device** list) {
  const Api& a = TheApi();
  if (a.free_device_list != nullptr && list != nullptr) a.free_device_list(list);
}

const char* GetDeviceName(ibv_device* d) {
  const Api& a = TheApi();
  return a.get_device_name != nullptr ? a.get_device_name(d) : "";
}

ibv_context* OpenDevice(ibv_device* d) {
  const Api& a = TheApi();
  return a.open_device != nullptr ? a.open_device(d) : NoLibrary<ibv_context>();
}

int CloseDevice(ibv_context* c) {
  const Api& a = TheApi();
  return a.close_device != nullptr ? a.close_device(c) : ENOSYS;
}

int QueryDevice(ibv_context* c, ibv_device_attr* attr) {
  const Api& a = TheApi();
  return a.query_device != nullptr ? a.query_device(c, attr) : ENOSYS;
}

int QueryPort(ibv_context* c, uint8_t port, ibv_port_attr* attr) {
  // verbs.h's ___ibv_query_port: the extended op fills the whole struct; the
  // exported function only the compat prefix.
  if (verbs_context* vctx = verbs_get_ctx_op(c, query_port)) {
    return vctx->query_port(c, port, attr, sizeof(*attr));
  }
  const Api& a = TheApi();
  if (a.query_port == nullptr) return ENOSYS;
  std::memset(attr, 0, sizeof(*attr));
  return a.query_port(c, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

ssize_t QueryGidTable(ibv_context* c, ibv_gid_entry* entries, size_t max_entries) {
  const Api& a = TheApi();
  if (a.query_gid_table == nullptr) return -ENOSYS;
  return a.query_gid_table(c, entries, max_entries, 0, sizeof(*entries));
}

ibv_pd* AllocPd(ibv_context* c) {
  const Api& a = TheApi();
  return a.alloc_pd != nullptr ? a.alloc_pd(c) : NoLibrary<ibv_pd>();
}

int DeallocPd(ibv_pd* pd) {
  const Api& a = TheApi();
  return a.dealloc_pd != nullptr ? a.dealloc_pd(pd) : ENOSYS;
}

ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  const Api& a = TheApi();
  return a.reg_mr != nullptr ? a.reg_mr(pd, addr, length, access) : NoLibrary<ibv_mr>();
}

int DeregMr(ibv_mr* mr) {
  const Api& a = TheApi();
  return a.dereg_mr != nullptr ? a.dereg_mr(mr) : ENOSYS;
}

ibv_cq* CreateCq(ibv_context* c, int cqe) {
  const Api& a = TheApi();
  return a.create_cq != nullptr ? a.create_cq(c, cqe, nullptr, nullptr, 0) : NoLibrary<ibv_cq>();
}

int DestroyCq(ibv_cq* cq) {
  const Api& a = TheApi();
  return a.destroy_cq != nullptr ? a.destroy_cq(cq) : ENOSYS;
}

ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  const Api& a = TheApi();
  return a.create_qp != nullptr ? a.create_qp(pd, attr) : NoLibrary<ibv_qp>();
}

int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  const Api& a = TheApi();
  return a.modify_qp != nullptr ? a.modify_qp(qp, attr, mask) : ENOSYS;
}

int DestroyQp(ibv_qp* qp) {
  const Api& a = TheApi();
  return a.destroy_qp != nullptr ? a.destroy_qp(qp) : ENOSYS;
}

const char* WcStatusStr(ibv_wc_status s) {
  const Api& a = TheApi();
  return a.wc_status_str != nullptr ? a.wc_status_str(s) : "libibverbs not loaded";
}

ibv_qp* EfaCreateQpEx(ibv_context* c, ibv_qp_init_attr_ex* attr, efadv_qp_init_attr* efa_attr) {
  const EfaApi& a = TheEfaApi();
  if (a.create_qp_ex == nullptr) return NoLibrary<ibv_qp>();
  return a.create_qp_ex(c, attr, efa_attr, sizeof(*efa_attr));
}

}  // namespace fabric::verbs
