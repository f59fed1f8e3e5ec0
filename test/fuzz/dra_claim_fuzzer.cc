// A ResourceClaim as the API server answers it (resource.k8s.io/v1 JSON), the
// input of the DRA plugin's NodePrepareResources:
// ParseClaimAllocation (plugin/dra/claim_allocation.h), asked for claim
// team-a/pair UID u-1 of our driver on node-a.
// Input: the claim's JSON bytes.
// Invariant: the parser never throws or crashes and fails only with
// kInvalidArgument or kFailedPrecondition; an accepted claim names what was
// asked, has 1..256 results, each of our driver and node-a's pool with
// non-empty request and device names of clean text (CheckExternalName: UTF-8,
// no control characters, at most 253 bytes); DumpJson of those results does
// not throw, and the claim written back from them parses to the same results.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/base/json_text.h"
#include "agent/base/utf8.h"
#include "plugin/dra/claim_allocation.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::dra::AllocationResult;
using fabric::dra::ClaimAllocation;
using fabric::dra::kDriverName;
using fabric::dra::ParseClaimAllocation;

constexpr char kNamespace[] = "team-a";
constexpr char kName[] = "pair";
constexpr char kUid[] = "u-1";
constexpr char kPool[] = "node-a";

absl::StatusOr<ClaimAllocation> Parse(absl::string_view text) {
  return ParseClaimAllocation(text, kNamespace, kName, kUid, kDriverName, kPool);
}

bool Clean(const std::string& s) { return fabric::CheckExternalName("x", s, 253).ok(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ClaimAllocation> claim = Parse(text);
  if (!claim.ok()) {
    FUZZ_CHECK(claim.status().code() == absl::StatusCode::kInvalidArgument ||
               claim.status().code() == absl::StatusCode::kFailedPrecondition);
    FUZZ_CHECK(fabric::IsValidUtf8(claim.status().message()));
    return 0;
  }
  FUZZ_CHECK(claim->claim_namespace == kNamespace && claim->name == kName && claim->uid == kUid);
  FUZZ_CHECK(!claim->results.empty() && claim->results.size() <= 256);
  nlohmann::json results = nlohmann::json::array();
  for (const AllocationResult& r : claim->results) {
    FUZZ_CHECK(r.driver == kDriverName);
    FUZZ_CHECK(r.pool == kPool);
    FUZZ_CHECK(!r.request.empty() && !r.device.empty());
    FUZZ_CHECK(fabric::IsValidUtf8(r.request) && fabric::IsValidUtf8(r.device));
    FUZZ_CHECK(Clean(r.request) && Clean(r.device));
    results.push_back(
        {{"request", r.request}, {"driver", r.driver}, {"pool", r.pool}, {"device", r.device}});
  }
  // DumpJson must not throw on what the parser let through (the plugin logs
  // and answers these names); the written-back claim must read the same.
  const nlohmann::json written = {
      {"metadata", {{"namespace", kNamespace}, {"name", kName}, {"uid", kUid}}},
      {"status", {{"allocation", {{"devices", {{"results", results}}}}}}}};
  const std::string again_text = fabric::DumpJson(written);
  absl::StatusOr<ClaimAllocation> again = Parse(again_text);
  FUZZ_CHECK(again.ok() && again->results == claim->results);
  return 0;
}
