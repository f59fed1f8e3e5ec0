#include "agent/cni_service/attachment_store.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/json_text.h"
#include "agent/base/logging.h"
#include "agent/base/status_macros.h"

namespace fabric::cni_service {
namespace {

constexpr char kSuffix[] = ".json";
constexpr int kFormatVersion = 1;

// File-name-safe form: [A-Za-z0-9_.] kept, everything else %XX, so keys from
// arbitrary network names never escape the directory. '-' is escaped too: it
// separates the key's parts in the file name, so ("a-b", "c") and ("a", "b-c")
// cannot share a file.
std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  if (out == "." || out == "..") out = absl::StrCat("%2E", out.substr(1));
  return out;
}

// The first format (kept '-' unescaped, so two keys could map to one name).
// Only read, to find records an older agent wrote.
std::string LegacyEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '_' || c == '.' || c == '-') {
      out.push_back(static_cast<char>(c));
    } else {
      out += absl::StrFormat("%%%02X", c);
    }
  }
  if (out == "." || out == "..") out = absl::StrCat("%2E", out.substr(1));
  return out;
}

// A name longer than a file name may be (NAME_MAX 255) keeps a prefix and a
// hash of the whole; the key stored inside the file decides (see Load).
constexpr size_t kMaxStem = 200;
std::string Shorten(const std::string& stem) {
  if (stem.size() <= kMaxStem) return stem;
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : stem) h = (h ^ c) * 1099511628211ull;
  return absl::StrCat(stem.substr(0, kMaxStem - 17), "~", absl::Hex(h, absl::kZeroPad16));
}

bool SameKey(const AttachmentKey& a, const AttachmentKey& b) {
  return a.network_name == b.network_name && a.container_id == b.container_id &&
         a.ifname == b.ifname;
}

DeviceAction ActionFromName(const std::string& s) {
  if (s == "moved") return DeviceAction::kMoved;
  if (s == "not-moved-efa") return DeviceAction::kNotMovedEfa;
  if (s == "not-moved-shared-token") return DeviceAction::kNotMovedSharedToken;
  return DeviceAction::kAttributed;
}

nlohmann::json ToJson(const AttachmentRecord& r) {
  nlohmann::json devices = nlohmann::json::array();
  for (const auto& d : r.devices) {
    devices.push_back({{"container", d.container},
                       {"resource", d.resource},
                       {"deviceID", d.device_id},
                       {"rdmaDevice", d.rdma_device},
                       {"action", DeviceActionName(d.action)},
                       {"detail", d.detail}});
  }
  return {{"version", kFormatVersion},
          {"networkName", r.key.network_name},
          {"containerID", r.key.container_id},
          {"ifname", r.key.ifname},
          {"netns", r.netns},
          {"podNamespace", r.pod_namespace},
          {"podName", r.pod_name},
          {"podUID", r.pod_uid},
          {"netnsMode", r.netns_mode},
          {"devices", devices},
          {"warnings", r.warnings},
          {"releasePending", r.release_pending}};
}

absl::StatusOr<AttachmentRecord> FromJson(const std::string& text, const std::string& path) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(absl::StrCat("corrupt CNI state file ", path));
  }
  try {
    AttachmentRecord r;
    r.key.network_name = j.value("networkName", "");
    r.key.container_id = j.value("containerID", "");
    r.key.ifname = j.value("ifname", "");
    r.netns = j.value("netns", "");
    r.pod_namespace = j.value("podNamespace", "");
    r.pod_name = j.value("podName", "");
    r.pod_uid = j.value("podUID", "");
    r.netns_mode = j.value("netnsMode", "");
    r.release_pending = j.value("releasePending", false);
    r.warnings = j.value("warnings", std::vector<std::string>{});
    for (const auto& d : j.value("devices", nlohmann::json::array())) {
      r.devices.push_back(AttachedDevice{
          d.value("container", ""), d.value("resource", ""), d.value("deviceID", ""),
          d.value("rdmaDevice", ""), ActionFromName(d.value("action", "")), d.value("detail", "")});
    }
    return r;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("corrupt CNI state file ", path, ": ", e.what()));
  }
}

}  // namespace

const char* DeviceActionName(DeviceAction a) {
  switch (a) {
    case DeviceAction::kAttributed:
      return "attributed";
    case DeviceAction::kMoved:
      return "moved";
    case DeviceAction::kNotMovedEfa:
      return "not-moved-efa";
    case DeviceAction::kNotMovedSharedToken:
      return "not-moved-shared-token";
  }
  return "attributed";
}

std::string AttachmentStore::PathFor(const AttachmentKey& key) const {
  return absl::StrCat(dir_, "/",
                      Shorten(absl::StrCat(Escape(key.network_name), "-", Escape(key.container_id),
                                           "-", Escape(key.ifname))),
                      kSuffix);
}

std::string AttachmentStore::LegacyPathFor(const AttachmentKey& key) const {
  return absl::StrCat(dir_, "/", LegacyEscape(key.network_name), "-",
                      LegacyEscape(key.container_id), "-", LegacyEscape(key.ifname), kSuffix);
}

absl::StatusOr<std::optional<AttachmentRecord>> AttachmentStore::LoadPath(
    const std::string& path, const AttachmentKey& key) const {
  auto text = ReadFile(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) return std::optional<AttachmentRecord>();
    return text.status();
  }
  auto rec = FromJson(*text, path);
  if (!rec.ok()) return rec.status();
  // Another key's record (a legacy name shared by two keys, or a shortened
  // name's hash collision) is not this key's.
  if (!SameKey(rec->key, key)) return std::optional<AttachmentRecord>();
  return std::optional<AttachmentRecord>(std::move(*rec));
}

absl::Status AttachmentStore::Save(const AttachmentRecord& record) {
  FABRIC_RETURN_IF_ERROR(MkdirAll(dir_, 0700));
  const std::string path = PathFor(record.key);
  if (auto text = ReadFile(path); text.ok()) {
    auto rec = FromJson(*text, path);
    if (rec.ok() && !SameKey(rec->key, record.key)) {
      return absl::AlreadyExistsError(
          absl::StrCat("CNI state file ", path, " already holds another attachment"));
    }
  }
  FABRIC_RETURN_IF_ERROR(WriteFileAtomic(path, DumpJson(ToJson(record), 2) + "\n", 0600));
  // A record an older agent wrote for this key now lives under the new name.
  if (const std::string legacy = LegacyPathFor(record.key); legacy != path) {
    auto old = LoadPath(legacy, record.key);
    if (old.ok() && old->has_value()) ::unlink(legacy.c_str());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<AttachmentRecord>> AttachmentStore::Load(
    const AttachmentKey& key) const {
  FABRIC_ASSIGN_OR_RETURN(auto rec, LoadPath(PathFor(key), key));
  if (rec) return rec;
  const std::string legacy = LegacyPathFor(key);
  if (legacy == PathFor(key)) return rec;
  return LoadPath(legacy, key);
}

absl::Status AttachmentStore::Remove(const AttachmentKey& key) {
  const std::string path = PathFor(key);
  auto rec = LoadPath(path, key);
  // Ours, or unreadable under our own name: remove. Another key's: keep.
  if (!rec.ok() || rec->has_value()) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError(errno, "unlink", path);
  }
  const std::string legacy = LegacyPathFor(key);
  if (legacy != path) {
    auto old = LoadPath(legacy, key);
    if (old.ok() && old->has_value() && ::unlink(legacy.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError(errno, "unlink", legacy);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<AttachmentRecord>> AttachmentStore::LoadAll() const {
  std::vector<AttachmentRecord> out;
  auto names = ListDir(dir_);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) return out;
    return names.status();
  }
  for (const auto& name : *names) {
    if (!absl::EndsWith(name, kSuffix)) continue;  // temp files of WriteFileAtomic
    std::string path = absl::StrCat(dir_, "/", name);
    auto text = ReadFile(path);
    if (!text.ok()) continue;
    auto rec = FromJson(*text, path);
    if (!rec.ok()) {
      LogWarn(Component::kCni, "skipping {}", rec.status().ToString());
      continue;
    }
    out.push_back(std::move(*rec));
  }
  return out;
}

}  // namespace fabric::cni_service
