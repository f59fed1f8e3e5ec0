#include "agent/dra_front/dra_device_preparer.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "agent/base/logging.h"
#include "agent/cdi/cdi_spec.h"

namespace fabric::dra {

engine_env::EngineEnv ClaimEngineEnv(
    const PoolRegistry& registry, const std::map<std::string, std::vector<std::string>>& grants) {
  engine_env::EngineEnv out;
  std::map<std::string, std::string> set_by;  // variable -> resource that set it
  std::vector<std::string> conflicting;
  for (const std::shared_ptr<PoolState>& pool : registry.pools()) {
    auto it = grants.find(pool->resource());
    if (it == grants.end()) continue;
    const std::shared_ptr<const PoolSnapshot> snap = pool->snapshot();
    std::vector<const RdmaDevice*> devices;
    for (const std::string& name : it->second) {
      auto d = snap->devices.find(name);
      if (d != snap->devices.end() &&
          std::find(devices.begin(), devices.end(), &d->second) == devices.end()) {
        devices.push_back(&d->second);
      }
    }
    engine_env::EngineEnv env = engine_env::ForGrant(snap->env, devices);
    out.notes.insert(out.notes.end(), env.notes.begin(), env.notes.end());
    // What the GID index variables named, so a later table change is seen.
    pool->gid_ledger().Record(env.given, snap->mode == PoolMode::kExclusive);
    for (auto& [name, value] : env.vars) {
      auto have = std::find_if(out.vars.begin(), out.vars.end(),
                               [&var = name](const auto& v) { return v.first == var; });
      if (have == out.vars.end()) {
        if (std::find(conflicting.begin(), conflicting.end(), name) == conflicting.end()) {
          out.vars.push_back({name, value});
          set_by[name] = pool->resource();
        }
      } else if (have->second != value) {
        out.notes.push_back(absl::StrCat(name, " not set: ", set_by[name], " gives '", have->second,
                                         "', ", pool->resource(), " gives '", value, "'"));
        conflicting.push_back(name);
        out.vars.erase(have);
      }
    }
  }
  return out;
}

DraDevicePreparer::DraDevicePreparer(PoolRegistry* registry, std::function<DraNames()> names,
                                     std::function<absl::Status(const std::string&)> cdi_ready,
                                     ClaimEnvSpecs* env_specs)
    : registry_(registry),
      names_(std::move(names)),
      cdi_ready_(std::move(cdi_ready)),
      env_specs_(env_specs) {}

absl::StatusOr<std::vector<std::vector<std::string>>> DraDevicePreparer::Prepare(
    const std::string& claim_uid, const std::vector<std::string>& device_names) {
  const DraNames names = names_();
  std::vector<std::vector<std::string>> cdi_ids;
  std::map<std::string, std::vector<std::string>> units_by_pool, devices_by_pool;
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
    devices_by_pool[u->resource].push_back(u->ibdev);
    cdi_ids.push_back({cdi::QualifiedName(kind, u->ibdev)});
  }
  // Per pool, as Allocate does; a refusal names the device and its holder.
  for (const auto& [resource, ids] : units_by_pool) {
    if (absl::Status s = registry_->Claim(resource, ids); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("claim ", claim_uid, ": ", s.message()));
    }
  }
  if (env_specs_ == nullptr) return cdi_ids;
  engine_env::EngineEnv env = ClaimEngineEnv(*registry_, devices_by_pool);
  for (const std::string& n : env.notes) {
    LogInfo(Component::kDra, "claim {}: engine env: {}", claim_uid, n);
  }
  if (env.vars.empty()) return cdi_ids;
  absl::StatusOr<std::string> id = env_specs_->Write(claim_uid, env.vars);
  if (!id.ok()) {
    return absl::Status(id.status().code(),
                        absl::StrCat("claim ", claim_uid, ": engine environment not written to ",
                                     env_specs_->SpecPath(claim_uid), ": ", id.status().message()));
  }
  for (std::vector<std::string>& ids : cdi_ids) ids.push_back(*id);
  return cdi_ids;
}

absl::Status DraDevicePreparer::Unprepare(const std::string& claim_uid) {
  return env_specs_ == nullptr ? absl::OkStatus() : env_specs_->Remove(claim_uid);
}

}  // namespace fabric::dra
