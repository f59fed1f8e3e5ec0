#include "agent/kubeapi/curl_library.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace fabric::kubeapi {
namespace {

constexpr char kLibrary[] = "libcurl.so.4";

absl::StatusOr<const CurlApi*> Load() {
  void* lib = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = ::dlerror();
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load ", kLibrary, " (Debian package libcurl4): ", e ? e : "?"));
  }
  auto* api = new CurlApi();
  absl::Status missing;
  auto bind = [&](auto& fn, const char* name) {
    void* sym = ::dlsym(lib, name);
    if (sym == nullptr && missing.ok()) {
      missing = absl::FailedPreconditionError(absl::StrCat(kLibrary, " lacks ", name));
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(sym);
  };
  bind(api->global_init, "curl_global_init");
  bind(api->easy_strerror, "curl_easy_strerror");
  bind(api->easy_init, "curl_easy_init");
  bind(api->easy_cleanup, "curl_easy_cleanup");
  bind(api->easy_reset, "curl_easy_reset");
  bind(api->easy_setopt, "curl_easy_setopt");
  bind(api->easy_getinfo, "curl_easy_getinfo");
  bind(api->easy_escape, "curl_easy_escape");
  bind(api->free, "curl_free");
  bind(api->slist_append, "curl_slist_append");
  bind(api->slist_free_all, "curl_slist_free_all");
  bind(api->multi_init, "curl_multi_init");
  bind(api->multi_cleanup, "curl_multi_cleanup");
  bind(api->multi_add_handle, "curl_multi_add_handle");
  bind(api->multi_remove_handle, "curl_multi_remove_handle");
  bind(api->multi_perform, "curl_multi_perform");
  bind(api->multi_poll, "curl_multi_poll");
  bind(api->multi_wakeup, "curl_multi_wakeup");
  bind(api->multi_info_read, "curl_multi_info_read");
  if (!missing.ok()) {
    delete api;
    return missing;  // the library stays loaded: dlclose of a half-used one gains nothing
  }
  const CURLcode rc = api->global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) {
    const std::string why = api->easy_strerror(rc);
    delete api;
    return absl::InternalError(absl::StrCat("curl_global_init: ", why));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CurlApi*> LoadCurl() {
  // Loaded once for the process; never unloaded (handles may outlive any owner).
  static const absl::StatusOr<const CurlApi*>* loaded = new absl::StatusOr<const CurlApi*>(Load());
  return *loaded;
}

}  // namespace fabric::kubeapi
