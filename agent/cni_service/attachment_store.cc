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
#include "agent/base/logging.h"
#include "agent/base/status_macros.h"

namespace fabric::cni_service {
namespace {

constexpr char kSuffix[] = ".json";
constexpr int kFormatVersion = 1;

// File-name-safe form: [A-Za-z0-9_.-] kept, everything else %XX, so keys
// from arbitrary network names never escape the directory.
std::string Escape(const std::string& s) {
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
  return absl::StrCat(dir_, "/", Escape(key.network_name), "-", Escape(key.container_id), "-",
                      Escape(key.ifname), kSuffix);
}

absl::Status AttachmentStore::Save(const AttachmentRecord& record) {
  FABRIC_RETURN_IF_ERROR(MkdirAll(dir_, 0700));
  return WriteFileAtomic(PathFor(record.key), ToJson(record).dump(2) + "\n", 0600);
}

absl::StatusOr<std::optional<AttachmentRecord>> AttachmentStore::Load(
    const AttachmentKey& key) const {
  std::string path = PathFor(key);
  auto text = ReadFile(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) return std::optional<AttachmentRecord>();
    return text.status();
  }
  auto rec = FromJson(*text, path);
  if (!rec.ok()) return rec.status();
  return std::optional<AttachmentRecord>(std::move(*rec));
}

absl::Status AttachmentStore::Remove(const AttachmentKey& key) {
  std::string path = PathFor(key);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError(errno, "unlink", path);
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
