#include "agent/cdi/cdi_spec_writer.h"

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/base/logging.h"
#include "agent/base/status_macros.h"

namespace fabric::cdi {
namespace {

absl::Status RemoveIfPresent(const std::string& path) {
  if (::remove(path.c_str()) != 0 && errno != ENOENT) return ErrnoError(errno, "unlink", path);
  return absl::OkStatus();
}

// Writes only when the content differs, so CDI caches watching the directory
// (containerd, CRI-O refresh on inotify) are not poked for nothing.
absl::Status WriteIfChanged(const std::string& path, const std::string& contents) {
  absl::StatusOr<std::string> old = ReadFile(path);
  if (old.ok() && *old == contents) return absl::OkStatus();
  return WriteFileAtomic(path, contents, 0644);
}

}  // namespace

CdiSpecWriter::CdiSpecWriter(std::string cdi_dir, std::string state_dir)
    : cdi_dir_(std::move(cdi_dir)), state_dir_(std::move(state_dir)) {}

std::string CdiSpecWriter::SpecPath(const std::string& kind) const {
  return absl::StrCat(cdi_dir_, "/", SpecFileName(kind));
}

std::string CdiSpecWriter::StatePath(const std::string& kind) const {
  return absl::StrCat(state_dir_, "/cdi/", SpecFileName(kind));
}

std::vector<CdiDevice> CdiSpecWriter::LastWritten(const std::string& kind) const {
  for (const std::string& path : {StatePath(kind), SpecPath(kind)}) {
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) continue;
    absl::StatusOr<CdiSpecInput> parsed = ParseSpec(*text);
    if (!parsed.ok() || parsed->kind != kind) {
      LogWarn(Component::kCdi, "ignoring unreadable previous CDI spec {}: {}", path,
              parsed.ok() ? std::string("kind mismatch") : parsed.status().ToString());
      continue;
    }
    return std::move(parsed->devices);
  }
  return {};
}

absl::Status CdiSpecWriter::Update(const CdiSpecInput& input,
                                   const std::set<std::string>& still_referenced) {
  FABRIC_RETURN_IF_ERROR(ValidateKind(input.kind));
  std::lock_guard<std::mutex> lock(mu_);

  CdiSpecInput merged = input;
  std::set<std::string> present;
  for (const CdiDevice& d : input.devices) present.insert(d.name);
  std::set<std::string> wanted;
  for (const std::string& name : still_referenced) {
    if (!present.count(name)) wanted.insert(name);
  }
  if (!wanted.empty()) {
    for (CdiDevice& old : LastWritten(input.kind)) {
      if (wanted.erase(old.name) == 0) continue;
      LogInfo(Component::kCdi, "keeping CDI entry {} for a live allocation",
              QualifiedName(input.kind, old.name));
      merged.devices.push_back(std::move(old));
    }
    for (const std::string& name : wanted) {
      LogWarn(Component::kCdi,
              "CDI device {} is referenced by a live allocation but was never written; "
              "containers using it will fail to start",
              QualifiedName(input.kind, name));
    }
  }

  if (merged.devices.empty()) return RemoveFiles(input.kind);

  FABRIC_ASSIGN_OR_RETURN(std::string text, RenderSpec(merged));
  FABRIC_RETURN_IF_ERROR(MkdirAll(state_dir_ + "/cdi", 0755));
  FABRIC_RETURN_IF_ERROR(MkdirAll(cdi_dir_, 0755));
  // State first: after a crash between the two writes the state is a superset
  // of the spec, never missing an entry the spec had.
  FABRIC_RETURN_IF_ERROR(WriteIfChanged(StatePath(input.kind), text));
  FABRIC_RETURN_IF_ERROR(WriteIfChanged(SpecPath(input.kind), text));
  return absl::OkStatus();
}

std::vector<std::string> CdiSpecWriter::WrittenKinds() const {
  std::vector<std::string> kinds;
  absl::StatusOr<std::vector<std::string>> names = ListDir(state_dir_ + "/cdi");
  if (!names.ok()) return kinds;
  for (const std::string& name : *names) {
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    absl::StatusOr<std::string> text = ReadFile(state_dir_ + "/cdi/" + name);
    if (!text.ok()) continue;
    absl::StatusOr<CdiSpecInput> parsed = ParseSpec(*text);
    if (parsed.ok() && SpecFileName(parsed->kind) == name) kinds.push_back(parsed->kind);
  }
  return kinds;
}

absl::Status CdiSpecWriter::RemoveKind(const std::string& kind) {
  std::lock_guard<std::mutex> lock(mu_);
  return RemoveFiles(kind);
}

absl::Status CdiSpecWriter::RemoveFiles(const std::string& kind) {
  // Spec first, so the state copy is never missing an entry the spec has.
  FABRIC_RETURN_IF_ERROR(RemoveIfPresent(SpecPath(kind)));
  return RemoveIfPresent(StatePath(kind));
}

}  // namespace fabric::cdi
