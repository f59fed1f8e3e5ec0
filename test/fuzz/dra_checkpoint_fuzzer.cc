// The DRA plugin's prepared-claims checkpoint (<state dir>/prepared-claims.json),
// read back from the host at start: ParsePreparedClaims
// (plugin/dra/prepared_claims.h).
// Input: the file's contents.
// Invariant: the parser never throws or crashes and fails only with
// kDataLoss (the file is then moved aside); every accepted claim has a
// non-empty UID and only clean text (CheckExternalName: UTF-8, no control
// characters) in its UID, namespace, name, pools, devices, request names and
// CDI IDs; SerializePreparedClaims of the result parses to the same claims,
// and serializing those again gives the same bytes.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "agent/base/utf8.h"
#include "plugin/dra/prepared_claims.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::dra::ParsePreparedClaims;
using fabric::dra::PreparedClaim;
using fabric::dra::PreparedDevice;
using fabric::dra::SerializePreparedClaims;

bool Clean(const std::string& s) { return fabric::CheckExternalName("x", s, 512).ok(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::map<std::string, PreparedClaim>> claims =
      ParsePreparedClaims(text, "prepared-claims.json");
  if (!claims.ok()) {
    FUZZ_CHECK(claims.status().code() == absl::StatusCode::kDataLoss);
    FUZZ_CHECK(fabric::IsValidUtf8(claims.status().message()));
    return 0;
  }
  for (const auto& [uid, claim] : *claims) {
    FUZZ_CHECK(!uid.empty() && Clean(uid));
    FUZZ_CHECK(Clean(claim.claim_namespace) && Clean(claim.name));
    for (const PreparedDevice& d : claim.devices) {
      FUZZ_CHECK(Clean(d.pool) && Clean(d.device));
      for (const std::string& r : d.request_names) FUZZ_CHECK(Clean(r));
      for (const std::string& c : d.cdi_device_ids) FUZZ_CHECK(Clean(c));
    }
  }
  const std::string written = SerializePreparedClaims(*claims);
  absl::StatusOr<std::map<std::string, PreparedClaim>> again =
      ParsePreparedClaims(written, "rewritten");
  FUZZ_CHECK(again.ok() && *again == *claims);
  FUZZ_CHECK(SerializePreparedClaims(*again) == written);
  return 0;
}
