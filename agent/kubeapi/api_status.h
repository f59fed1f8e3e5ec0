// The one mapping from Kubernetes API errors (HTTP code + Status body, or a
// watch ERROR event's Status) to absl::Status, and the resource paths the
// client accepts. Every message names the object and quotes the server.
#ifndef FABRIC_AGENT_KUBEAPI_API_STATUS_H_
#define FABRIC_AGENT_KUBEAPI_API_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace fabric::kubeapi {

// Codes: 400 kInvalidArgument, 401 kUnauthenticated, 403 kPermissionDenied,
// 404 kNotFound, 409 kAborted (reason AlreadyExists: kAlreadyExists),
// 410 kOutOfRange ("resourceVersion too old"), 422 kInvalidArgument (a
// Status reason Forbidden: kPermissionDenied), 429 kResourceExhausted,
// 5xx kUnavailable, other kUnknown.
// `what` names the operation and object ("update resourceslices node-a-0").
// `body` is the response body: a k8s Status JSON whose message is quoted
// (sanitized, bounded); any other body is quoted escaped and truncated.
absl::Status StatusFromApiResponse(long http_code, absl::string_view body, absl::string_view what);

// The same for a parsed Status object (a watch ERROR event's "object").
absl::Status StatusFromApiStatusObject(const nlohmann::json& status, absl::string_view what);

// "update resourceclaims ns/name" from a verb and a resource path; a path it
// does not understand is quoted escaped.
std::string DescribeRequest(absl::string_view verb, absl::string_view path);

// Checks that `path` is a resource path we send: /api/... or /apis/...,
// segments of [a-z0-9.-] (names) only, no query. kInvalidArgument otherwise
// (names come from outside; one with '/', '?' or '%' must not reach a URL).
absl::Status CheckResourcePath(absl::string_view path);

// Builds resource paths from parts, each checked (DNS-subdomain characters,
// at most 253 bytes). `api_prefix` is "/apis/resource.k8s.io/v1" or "/api/v1";
// an empty `ns` means cluster-scoped.
absl::StatusOr<std::string> CollectionPath(absl::string_view api_prefix, absl::string_view resource,
                                           absl::string_view ns = "");
absl::StatusOr<std::string> ObjectPath(absl::string_view api_prefix, absl::string_view resource,
                                       absl::string_view ns, absl::string_view name,
                                       absl::string_view subresource = "");

// Bytes from the server made safe for a message: valid UTF-8, control
// characters escaped, at most `max_len` bytes (then "...").
std::string SanitizeServerText(absl::string_view s, size_t max_len = 512);

}  // namespace fabric::kubeapi

#endif  // FABRIC_AGENT_KUBEAPI_API_STATUS_H_
