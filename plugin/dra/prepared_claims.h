// PreparedClaims: the DRA plugin's checkpoint of what NodePrepareResources
// answered, claim UID -> {namespace, name, devices}. It makes prepare and
// unprepare idempotent across agent restarts: a claim prepared before a restart
// gets the same answer afterwards without preparing again.
//
// One JSON file under an injected state directory, rewritten atomically on
// every change (temp file, fsync, rename, fsync of the directory). Not
// thread-safe: DraPluginService guards it.
#ifndef FABRIC_PLUGIN_DRA_PREPARED_CLAIMS_H_
#define FABRIC_PLUGIN_DRA_PREPARED_CLAIMS_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabric::dra {

// One device of a prepared claim, as answered in NodePrepareResourceResponse.
struct PreparedDevice {
  std::vector<std::string> request_names;
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_device_ids;
  bool operator==(const PreparedDevice&) const = default;
};

struct PreparedClaim {
  std::string claim_namespace;
  std::string name;
  std::vector<PreparedDevice> devices;
  bool operator==(const PreparedClaim&) const = default;
};

// The checkpoint's file format (versioned JSON), separate from the file so
// that it can be tested and fuzzed on bytes. Parse refuses anything not in
// this shape with an error naming `source` and the offending field.
std::string SerializePreparedClaims(const std::map<std::string, PreparedClaim>& claims);
absl::StatusOr<std::map<std::string, PreparedClaim>> ParsePreparedClaims(absl::string_view text,
                                                                         absl::string_view source);

class PreparedClaims {
 public:
  static constexpr char kFileName[] = "prepared-claims.json";

  // `state_dir` is created on the first save.
  explicit PreparedClaims(std::string state_dir);

  // Reads the file. A missing file is an empty checkpoint (OK). A file that
  // does not parse is an error naming it; the set is then empty and the bad
  // file is moved aside to <file>.corrupt (kept for a human, and so that the
  // next save does not look like a fix).
  absl::Status Load();

  const PreparedClaim* Find(const std::string& uid) const;
  // Records (or replaces) a claim and persists; on a write error nothing
  // changes in memory either.
  absl::Status Put(const std::string& uid, PreparedClaim claim);
  // Forgets a claim and persists; an unknown UID is OK (nothing written).
  absl::Status Remove(const std::string& uid);

  const std::map<std::string, PreparedClaim>& claims() const { return claims_; }
  size_t size() const { return claims_.size(); }
  std::string path() const;

 private:
  absl::Status Save(const std::map<std::string, PreparedClaim>& claims) const;

  const std::string state_dir_;
  std::map<std::string, PreparedClaim> claims_;
};

}  // namespace fabric::dra

#endif  // FABRIC_PLUGIN_DRA_PREPARED_CLAIMS_H_
