#include "agent/dra_front/claim_env_specs.h"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/base/errors.h"
#include "agent/base/file_util.h"
#include "agent/cdi/cdi_spec.h"

namespace fabric::dra {
namespace {

absl::Status RemoveIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  return ErrnoError(errno, "unlink", path);
}

}  // namespace

ClaimEnvSpecs::ClaimEnvSpecs(std::string cdi_dir, std::string state_dir, std::string kind_vendor)
    : cdi_dir_(std::move(cdi_dir)),
      state_dir_(std::move(state_dir)),
      vendor_(std::move(kind_vendor)) {}

std::string ClaimEnvSpecs::FileName(const std::string& claim_uid) const {
  return absl::StrCat(vendor_, "-claim-", claim_uid, ".json");
}

std::string ClaimEnvSpecs::SpecPath(const std::string& claim_uid) const {
  return absl::StrCat(cdi_dir_, "/", FileName(claim_uid));
}

absl::StatusOr<std::string> ClaimEnvSpecs::Write(
    const std::string& claim_uid, const std::vector<std::pair<std::string, std::string>>& env) {
  cdi::CdiSpecInput in;
  in.kind = absl::StrCat(vendor_, "/claim");
  cdi::CdiDevice d;
  d.name = absl::StrCat("claim-", claim_uid);
  for (const auto& [name, value] : env) d.env.push_back(absl::StrCat(name, "=", value));
  in.devices.push_back(std::move(d));
  absl::StatusOr<std::string> text = cdi::RenderSpec(in);
  if (!text.ok()) return text.status();
  for (const std::string& dir : {state_dir_, cdi_dir_}) {
    if (absl::Status s = MkdirAll(dir); !s.ok()) return s;
    if (absl::Status s = WriteFileAtomic(absl::StrCat(dir, "/", FileName(claim_uid)), *text);
        !s.ok()) {
      return s;
    }
  }
  return cdi::QualifiedName(in.kind, in.devices[0].name);
}

absl::Status ClaimEnvSpecs::Remove(const std::string& claim_uid) {
  // The UID names a file: only what a CDI device name may hold (no '/').
  if (absl::Status s = cdi::ValidateDeviceName(absl::StrCat("claim-", claim_uid)); !s.ok()) {
    return s;
  }
  if (absl::Status s = RemoveIfPresent(SpecPath(claim_uid)); !s.ok()) return s;
  return RemoveIfPresent(absl::StrCat(state_dir_, "/", FileName(claim_uid)));
}

absl::StatusOr<int> ClaimEnvSpecs::Restore() {
  auto names = ListDir(state_dir_);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) return 0;
    return names.status();
  }
  int restored = 0;
  for (const std::string& n : *names) {
    if (!absl::StartsWith(n, vendor_ + "-claim-") || !absl::EndsWith(n, ".json")) continue;
    const std::string target = absl::StrCat(cdi_dir_, "/", n);
    if (PathExists(target)) continue;
    auto text = ReadFile(absl::StrCat(state_dir_, "/", n));
    if (!text.ok()) return text.status();
    if (absl::Status s = MkdirAll(cdi_dir_); !s.ok()) return s;
    if (absl::Status s = WriteFileAtomic(target, *text); !s.ok()) return s;
    ++restored;
  }
  return restored;
}

}  // namespace fabric::dra
