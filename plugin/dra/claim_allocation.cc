#include "plugin/dra/claim_allocation.h"

#include "absl/strings/str_cat.h"
#include "agent/base/utf8.h"
#include "nlohmann/json.hpp"

namespace fabric::dra {
namespace {

using nlohmann::json;

// The API server refuses objects over ~3 MiB; more is not a claim.
constexpr size_t kMaxClaimBytes = 4u << 20;
// resource.k8s.io/v1 AllocationResultsMaxSize is 32; leave room for growth,
// refuse what no API server sends.
constexpr size_t kMaxResults = 256;
// Kubernetes names: a DNS subdomain (253); request "a/b" two labels; pool a
// subdomain; device a label. 253 bounds them all.
constexpr size_t kMaxName = 253;

const json* Child(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

absl::StatusOr<ClaimAllocation> ParseClaimAllocation(
    absl::string_view claim_json, const std::string& claim_namespace, const std::string& name,
    const std::string& uid, absl::string_view driver, absl::string_view node_pool) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("ResourceClaim ", EscapeBytes(claim_namespace),
                                                   "/", EscapeBytes(name), ": ", why));
  };
  if (claim_json.size() > kMaxClaimBytes) return invalid("larger than 4 MiB");
  json doc = json::parse(claim_json.begin(), claim_json.end(), nullptr, false);
  if (doc.is_discarded()) return invalid("not valid JSON");
  return ClaimAllocationFromJson(doc, claim_namespace, name, uid, driver, node_pool);
}

absl::StatusOr<ClaimAllocation> ClaimAllocationFromJson(
    const nlohmann::json& doc, const std::string& claim_namespace, const std::string& name,
    const std::string& uid, absl::string_view driver, absl::string_view node_pool) {
  const std::string what =
      absl::StrCat("ResourceClaim ", EscapeBytes(claim_namespace), "/", EscapeBytes(name));
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
  };
  if (!doc.is_object()) return invalid("not a JSON object");

  // A string field, checked where it enters: printable UTF-8, bounded.
  auto text = [&](const json& obj, const char* key,
                  absl::string_view path) -> absl::StatusOr<std::string> {
    const json* v = Child(obj, key);
    if (v == nullptr) return std::string();
    if (!v->is_string()) return invalid(absl::StrCat(path, " is not a string"));
    const std::string& s = v->get_ref<const std::string&>();
    if (absl::Status st = CheckExternalName(path, s, kMaxName); !st.ok()) {
      return invalid(st.message());
    }
    return s;
  };

  const json* meta = Child(doc, "metadata");
  if (meta == nullptr || !meta->is_object()) return invalid("no metadata");
  auto got_uid = text(*meta, "uid", "metadata.uid");
  if (!got_uid.ok()) return got_uid.status();
  auto got_ns = text(*meta, "namespace", "metadata.namespace");
  if (!got_ns.ok()) return got_ns.status();
  auto got_name = text(*meta, "name", "metadata.name");
  if (!got_name.ok()) return got_name.status();
  if (*got_ns != claim_namespace || *got_name != name) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the API server answered for ", EscapeBytes(*got_ns), "/", EscapeBytes(*got_name)));
  }
  if (*got_uid != uid) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": has UID ", EscapeBytes(*got_uid),
                                                      ", the kubelet asked for ", EscapeBytes(uid),
                                                      " (deleted and re-created?)"));
  }

  const json* status = Child(doc, "status");
  if (status != nullptr && !status->is_object()) return invalid("status is not an object");
  const json* allocation = status == nullptr ? nullptr : Child(*status, "allocation");
  if (allocation == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": not allocated"));
  }
  if (!allocation->is_object()) return invalid("status.allocation is not an object");
  const json* devices = Child(*allocation, "devices");
  if (devices != nullptr && !devices->is_object()) {
    return invalid("status.allocation.devices is not an object");
  }
  const json* results = devices == nullptr ? nullptr : Child(*devices, "results");
  if (results != nullptr && !results->is_array()) {
    return invalid("status.allocation.devices.results is not a list");
  }
  if (results != nullptr && results->size() > kMaxResults) {
    return invalid(absl::StrCat("status.allocation.devices.results has ", results->size(),
                                " entries (at most ", kMaxResults, ")"));
  }

  ClaimAllocation out;
  out.claim_namespace = claim_namespace;
  out.name = name;
  out.uid = uid;
  if (results != nullptr) {
    for (size_t i = 0; i < results->size(); ++i) {
      const json& r = (*results)[i];
      const std::string path = absl::StrCat("status.allocation.devices.results[", i, "]");
      if (!r.is_object()) return invalid(absl::StrCat(path, " is not an object"));
      AllocationResult result;
      for (auto [key, field] :
           {std::pair{"driver", &result.driver}, std::pair{"request", &result.request},
            std::pair{"pool", &result.pool}, std::pair{"device", &result.device}}) {
        auto v = text(r, key, absl::StrCat(path, ".", key));
        if (!v.ok()) return v.status();
        *field = std::move(*v);
      }
      if (result.driver != driver) continue;  // another driver's device of the same claim
      for (auto [key, value] :
           {std::pair{"request", &result.request}, std::pair{"pool", &result.pool},
            std::pair{"device", &result.device}}) {
        if (value->empty()) return invalid(absl::StrCat(path, ".", key, " is empty"));
      }
      if (result.pool != node_pool) {
        return absl::FailedPreconditionError(
            absl::StrCat(what, ": ", path, " is device ", result.device, " of pool ", result.pool,
                         ", not of this node's pool ", node_pool, " (allocated for another node)"));
      }
      out.results.push_back(std::move(result));
    }
  }
  if (out.results.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": its allocation has no device of driver ", driver));
  }
  return out;
}

}  // namespace fabric::dra
