#include "plugin/dra/prepared_claims.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/json_text.h"
#include "agent/base/utf8.h"
#include "nlohmann/json.hpp"

namespace fabric::dra {
namespace {

using nlohmann::json;

constexpr int kFormatVersion = 1;
// Bounds against a damaged or hostile file: far above any real node (a node
// has tens of devices, a claim at most 32 allocation results).
constexpr size_t kMaxFileBytes = 16u << 20;
constexpr size_t kMaxStringBytes = 512;
constexpr size_t kMaxListItems = 1024;

absl::Status Bad(absl::string_view source, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(source, ": ", what));
}

absl::StatusOr<std::string> GetString(const json& obj, const char* key, absl::string_view where,
                                      absl::string_view source) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) {
    return Bad(source, absl::StrCat(where, ".", key, " is missing or not a string"));
  }
  const std::string& s = it->get_ref<const std::string&>();
  if (absl::Status st = CheckExternalName(absl::StrCat(where, ".", key), s, kMaxStringBytes);
      !st.ok()) {
    return Bad(source, st.message());
  }
  return s;
}

absl::StatusOr<std::vector<std::string>> GetStrings(const json& obj, const char* key,
                                                    absl::string_view where,
                                                    absl::string_view source) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::vector<std::string>{};
  if (!it->is_array() || it->size() > kMaxListItems) {
    return Bad(source, absl::StrCat(where, ".", key, " is not a list of strings"));
  }
  std::vector<std::string> out;
  for (const json& v : *it) {
    if (!v.is_string()) return Bad(source, absl::StrCat(where, ".", key, " holds a non-string"));
    const std::string& s = v.get_ref<const std::string&>();
    if (absl::Status st = CheckExternalName(absl::StrCat(where, ".", key), s, kMaxStringBytes);
        !st.ok()) {
      return Bad(source, st.message());
    }
    out.push_back(s);
  }
  return out;
}

// fsync of the directory makes the rename itself durable (a power loss after
// the answer must not bring back the old file).
absl::Status SyncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "open", dir);
  int rc = ::fsync(fd);
  int e = errno;
  ::close(fd);
  if (rc != 0) return ErrnoError(e, "fsync", dir);
  return absl::OkStatus();
}

}  // namespace

std::string SerializePreparedClaims(const std::map<std::string, PreparedClaim>& claims) {
  json doc = json::object();
  doc["version"] = kFormatVersion;
  json& out = doc["claims"] = json::object();
  for (const auto& [uid, claim] : claims) {
    json devices = json::array();
    for (const PreparedDevice& d : claim.devices) {
      devices.push_back({{"requestNames", d.request_names},
                         {"pool", d.pool},
                         {"device", d.device},
                         {"cdiDeviceIds", d.cdi_device_ids}});
    }
    out[uid] = {{"namespace", claim.claim_namespace}, {"name", claim.name}, {"devices", devices}};
  }
  return DumpJson(doc, 1);
}

absl::StatusOr<std::map<std::string, PreparedClaim>> ParsePreparedClaims(absl::string_view text,
                                                                         absl::string_view source) {
  if (text.size() > kMaxFileBytes) return Bad(source, "file is larger than 16 MiB");
  json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Bad(source, "not valid JSON");
  if (!doc.is_object()) return Bad(source, "not a JSON object");
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() ||
      version->get<int64_t>() != kFormatVersion) {
    return Bad(source, "version is missing or not 1");
  }
  auto claims = doc.find("claims");
  if (claims == doc.end() || !claims->is_object()) {
    return Bad(source, "claims is missing or not an object");
  }
  std::map<std::string, PreparedClaim> out;
  for (auto it = claims->begin(); it != claims->end(); ++it) {
    const std::string& uid = it.key();
    if (absl::Status st = CheckExternalName("claim UID", uid, kMaxStringBytes);
        !st.ok() || uid.empty()) {
      return Bad(source, st.ok() ? "empty claim UID" : st.message());
    }
    const std::string where = absl::StrCat("claims[", EscapeBytes(uid), "]");
    const json& c = it.value();
    if (!c.is_object()) return Bad(source, absl::StrCat(where, " is not an object"));
    PreparedClaim claim;
    auto ns = GetString(c, "namespace", where, source);
    if (!ns.ok()) return ns.status();
    auto name = GetString(c, "name", where, source);
    if (!name.ok()) return name.status();
    claim.claim_namespace = *ns;
    claim.name = *name;
    auto devices = c.find("devices");
    if (devices == c.end() || !devices->is_array() || devices->size() > kMaxListItems) {
      return Bad(source, absl::StrCat(where, ".devices is missing or not a list"));
    }
    for (size_t i = 0; i < devices->size(); ++i) {
      const json& d = (*devices)[i];
      const std::string dwhere = absl::StrCat(where, ".devices[", i, "]");
      if (!d.is_object()) return Bad(source, absl::StrCat(dwhere, " is not an object"));
      PreparedDevice dev;
      auto requests = GetStrings(d, "requestNames", dwhere, source);
      if (!requests.ok()) return requests.status();
      auto pool = GetString(d, "pool", dwhere, source);
      if (!pool.ok()) return pool.status();
      auto device = GetString(d, "device", dwhere, source);
      if (!device.ok()) return device.status();
      auto cdi = GetStrings(d, "cdiDeviceIds", dwhere, source);
      if (!cdi.ok()) return cdi.status();
      dev.request_names = std::move(*requests);
      dev.pool = *pool;
      dev.device = *device;
      dev.cdi_device_ids = std::move(*cdi);
      claim.devices.push_back(std::move(dev));
    }
    out[uid] = std::move(claim);
  }
  return out;
}

PreparedClaims::PreparedClaims(std::string state_dir) : state_dir_(std::move(state_dir)) {}

std::string PreparedClaims::path() const { return state_dir_ + "/" + kFileName; }

absl::Status PreparedClaims::Load() {
  claims_.clear();
  const std::string file = path();
  absl::StatusOr<std::string> text = ReadFile(file);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) return absl::OkStatus();
    return text.status();
  }
  auto parsed = ParsePreparedClaims(*text, file);
  if (!parsed.ok()) {
    const std::string aside = file + ".corrupt";
    if (::rename(file.c_str(), aside.c_str()) != 0) {
      return absl::DataLossError(absl::StrCat(parsed.status().message(), " (and cannot move it to ",
                                              aside, ": ", std::strerror(errno), ")"));
    }
    return absl::DataLossError(absl::StrCat(parsed.status().message(), " (moved to ", aside, ")"));
  }
  claims_ = std::move(*parsed);
  return absl::OkStatus();
}

const PreparedClaim* PreparedClaims::Find(const std::string& uid) const {
  auto it = claims_.find(uid);
  return it == claims_.end() ? nullptr : &it->second;
}

absl::Status PreparedClaims::Save(const std::map<std::string, PreparedClaim>& claims) const {
  if (absl::Status s = MkdirAll(state_dir_, 0700); !s.ok()) return s;
  if (absl::Status s = WriteFileAtomic(path(), SerializePreparedClaims(claims), 0600); !s.ok()) {
    return s;
  }
  return SyncDirectory(state_dir_);
}

absl::Status PreparedClaims::Put(const std::string& uid, PreparedClaim claim) {
  std::map<std::string, PreparedClaim> next = claims_;
  next[uid] = std::move(claim);
  if (absl::Status s = Save(next); !s.ok()) return s;
  claims_ = std::move(next);
  return absl::OkStatus();
}

absl::Status PreparedClaims::Remove(const std::string& uid) {
  if (!claims_.count(uid)) return absl::OkStatus();
  std::map<std::string, PreparedClaim> next = claims_;
  next.erase(uid);
  if (absl::Status s = Save(next); !s.ok()) return s;
  claims_ = std::move(next);
  return absl::OkStatus();
}

}  // namespace fabric::dra
