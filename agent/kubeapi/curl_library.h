// libcurl's entry points, loaded with dlopen on first use.
//
// Why not link it: libcurl.so.4 maps about 30 libraries (OpenSSL, nghttp2,
// GSSAPI, LDAP, ...) at load time, about 6 MiB of RSS measured on Debian 12,
// into every process that links it. fabric-agent needs the API server only
// with --pod-conditions (and fabric-dra always), so only those pay for it.
#ifndef FABRIC_AGENT_KUBEAPI_CURL_LIBRARY_H_
#define FABRIC_AGENT_KUBEAPI_CURL_LIBRARY_H_

#include <curl/curl.h>

#include "absl/status/statusor.h"

namespace fabric::kubeapi {

struct CurlApi {
  CURLcode (*global_init)(long flags);
  const char* (*easy_strerror)(CURLcode);
  CURL* (*easy_init)();
  void (*easy_cleanup)(CURL*);
  void (*easy_reset)(CURL*);
  CURLcode (*easy_setopt)(CURL*, CURLoption, ...);
  CURLcode (*easy_getinfo)(CURL*, CURLINFO, ...);
  char* (*easy_escape)(CURL*, const char*, int);
  void (*free)(void*);
  curl_slist* (*slist_append)(curl_slist*, const char*);
  void (*slist_free_all)(curl_slist*);
  CURLM* (*multi_init)();
  CURLMcode (*multi_cleanup)(CURLM*);
  CURLMcode (*multi_add_handle)(CURLM*, CURL*);
  CURLMcode (*multi_remove_handle)(CURLM*, CURL*);
  CURLMcode (*multi_perform)(CURLM*, int*);
  CURLMcode (*multi_poll)(CURLM*, curl_waitfd[], unsigned int, int, int*);
  CURLMcode (*multi_wakeup)(CURLM*);
  CURLMsg* (*multi_info_read)(CURLM*, int*);
};

// Loads libcurl.so.4 (Debian's libcurl4, the OpenSSL flavour) once and runs
// curl_global_init; later calls return the same table. FailedPrecondition
// naming the library and dlerror() when it is missing or lacks a symbol.
absl::StatusOr<const CurlApi*> LoadCurl();

}  // namespace fabric::kubeapi

#endif  // FABRIC_AGENT_KUBEAPI_CURL_LIBRARY_H_
