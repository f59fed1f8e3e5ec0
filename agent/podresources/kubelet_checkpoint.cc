#include "agent/podresources/kubelet_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/utf8.h"
#include "nlohmann/json.hpp"

namespace fabric::podresources {
namespace {

using json = nlohmann::json;

// Kubernetes names and UIDs are far shorter; device IDs are plugin-chosen.
constexpr size_t kMaxName = 1024;

absl::Status CheckField(const json& entry, const char* key, size_t index, std::string* out) {
  auto it = entry.find(key);
  if (it == entry.end() || !it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat("kubelet checkpoint: entry ", index, ": ", key,
                                                   " is missing or not a string"));
  }
  const auto& s = it->get_ref<const std::string&>();
  if (absl::Status st = CheckExternalName(
          absl::StrCat("kubelet checkpoint: entry ", index, ": ", key), s, kMaxName);
      !st.ok()) {
    return st;
  }
  *out = s;
  return absl::OkStatus();
}

absl::Status AddIds(const json& ids, size_t index, std::vector<std::string>* out) {
  if (!ids.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kubelet checkpoint: entry ", index, ": DeviceIDs holds a non-list"));
  }
  for (const json& id : ids) {
    if (!id.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("kubelet checkpoint: entry ", index, ": a device ID is not a string"));
    }
    const auto& s = id.get_ref<const std::string&>();
    if (absl::Status st = CheckExternalName(
            absl::StrCat("kubelet checkpoint: entry ", index, ": device ID"), s, kMaxName);
        !st.ok()) {
      return st;
    }
    if (std::find(out->begin(), out->end(), s) == out->end()) out->push_back(s);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PodDevices>> ParseKubeletCheckpoint(absl::string_view text) {
  if (text.size() > kMaxCheckpointBytes) {
    return absl::InvalidArgumentError(absl::StrCat("kubelet checkpoint: ", text.size(),
                                                   " bytes, more than ", kMaxCheckpointBytes));
  }
  const json doc = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("kubelet checkpoint: not JSON");
  if (!doc.is_object()) return absl::InvalidArgumentError("kubelet checkpoint: not an object");
  auto data = doc.find("Data");
  if (data == doc.end() || !data->is_object()) {
    return absl::InvalidArgumentError("kubelet checkpoint: no \"Data\" object");
  }
  std::vector<PodDevices> out;
  auto entries = data->find("PodDeviceEntries");
  if (entries == data->end() || entries->is_null()) return out;  // Go's nil slice
  if (!entries->is_array()) {
    return absl::InvalidArgumentError("kubelet checkpoint: PodDeviceEntries is not a list");
  }
  if (entries->size() > kMaxCheckpointEntries) {
    return absl::InvalidArgumentError(absl::StrCat("kubelet checkpoint: ", entries->size(),
                                                   " entries, more than ", kMaxCheckpointEntries));
  }
  out.reserve(entries->size());
  for (size_t i = 0; i < entries->size(); ++i) {
    const json& e = (*entries)[i];
    if (!e.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("kubelet checkpoint: entry ", i, " is not an object"));
    }
    PodDevices d;
    for (auto [key, field] : {std::pair<const char*, std::string*>{"PodUID", &d.pod_uid},
                              {"ContainerName", &d.container},
                              {"ResourceName", &d.resource}}) {
      if (absl::Status s = CheckField(e, key, i, field); !s.ok()) return s;
    }
    auto ids = e.find("DeviceIDs");
    if (ids != e.end() && ids->is_object()) {  // v1.20+: NUMA node -> IDs
      for (const auto& [numa, list] : ids->items()) {
        if (absl::Status s = AddIds(list, i, &d.device_ids); !s.ok()) return s;
      }
    } else if (ids != e.end() && !ids->is_null()) {  // before v1.20: a list
      if (absl::Status s = AddIds(*ids, i, &d.device_ids); !s.ok()) return s;
    }
    if (!d.device_ids.empty()) out.push_back(std::move(d));
  }
  return out;
}

absl::StatusOr<std::vector<PodDevices>> KubeletCheckpointReader::Read() {
  struct stat st;
  if (stat(path_.c_str(), &st) != 0) {
    const int err = errno;
    have_ = false;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat("kubelet checkpoint ", path_, " does not exist"));
    }
    return ErrnoError(err, "stat", path_);
  }
  const Stamp stamp{static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
  if (have_ && stamp == stamp_) return last_;
  if (static_cast<uint64_t>(st.st_size) > kMaxCheckpointBytes) {
    return absl::InvalidArgumentError(absl::StrCat("kubelet checkpoint ", path_, ": ", st.st_size,
                                                   " bytes, more than ", kMaxCheckpointBytes));
  }
  auto text = ReadFile(path_);
  if (!text.ok()) return text.status();
  auto parsed = ParseKubeletCheckpoint(*text);
  if (!parsed.ok()) return parsed.status();
  have_ = true;
  stamp_ = stamp;
  last_ = *parsed;
  return parsed;
}

}  // namespace fabric::podresources
