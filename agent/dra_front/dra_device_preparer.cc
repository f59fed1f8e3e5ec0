#include "agent/dra_front/dra_device_preparer.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/cdi/cdi_spec.h"

namespace fabric::dra {

DraDevicePreparer::DraDevicePreparer(PoolRegistry* registry, std::function<DraNames()> names,
                                     std::function<absl::Status(const std::string&)> cdi_ready)
    : registry_(registry), names_(std::move(names)), cdi_ready_(std::move(cdi_ready)) {}

absl::StatusOr<std::vector<std::string>> DraDevicePreparer::Prepare(
    const std::string& claim_uid, const std::vector<std::string>& device_names) {
  const DraNames names = names_();
  std::vector<std::string> cdi_ids;
  std::map<std::string, std::vector<std::string>> units_by_pool;
  for (const std::string& d : device_names) {
    const PublishedUnit* u = names.Lookup(d);
    if (u == nullptr) {
      return absl::NotFoundError(absl::StrCat("claim ", claim_uid, ": device ", d,
                                              " is not published by this node (any more)"));
    }
    const std::string kind = cdi::KindForResource(u->resource);
    if (cdi_ready_) {
      if (absl::Status s = cdi_ready_(kind); !s.ok()) return s;
    }
    units_by_pool[u->resource].push_back(u->unit_id);
    cdi_ids.push_back(cdi::QualifiedName(kind, u->ibdev));
  }
  // Per pool, as Allocate does; a refusal names the device and its holder.
  for (const auto& [resource, ids] : units_by_pool) {
    if (absl::Status s = registry_->Claim(resource, ids); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("claim ", claim_uid, ": ", s.message()));
    }
  }
  return cdi_ids;
}

absl::Status DraDevicePreparer::Unprepare(const std::string&) { return absl::OkStatus(); }

}  // namespace fabric::dra
