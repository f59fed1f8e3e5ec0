#include "agent/engine_env/engine_env.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fabric::engine_env {
namespace {

bool Has(const std::vector<EnvPreset>& presets, EnvPreset p) {
  return std::find(presets.begin(), presets.end(), p) != presets.end();
}

std::string PortList(const std::vector<const RdmaDevice*>& devices, bool skip_efa) {
  std::vector<std::string> out;
  for (const RdmaDevice* d : devices) {
    if (skip_efa && d->kind == DeviceKind::kEfa) continue;
    for (const PortInfo& p : d->ports) out.push_back(absl::StrCat(d->name, ":", p.number));
  }
  return absl::StrJoin(out, ",");
}

}  // namespace

std::vector<PortGid> PortGids(const std::vector<const RdmaDevice*>& devices) {
  std::vector<PortGid> out;
  for (const RdmaDevice* d : devices) {
    for (const PortInfo& p : d->ports) {
      out.push_back({d->name, p.number, gid::FindRoceV2Ipv4(p, d->kind == DeviceKind::kEfa)});
    }
  }
  return out;
}

GidAgreement AgreeOnGidIndex(const std::vector<PortGid>& gids) {
  GidAgreement a;
  if (gids.empty()) {
    a.reason = "no granted port";
    return a;
  }
  std::vector<std::string> missing, found;
  std::optional<int> first;
  bool differ = false;
  for (const PortGid& g : gids) {
    const std::string port = absl::StrCat(g.device, " port ", g.port);
    if (!g.choice.index) {
      missing.push_back(absl::StrCat(port, ": ", g.choice.reason));
      continue;
    }
    found.push_back(absl::StrCat(port, ": index ", *g.choice.index));
    if (!first) first = g.choice.index;
    differ = differ || *first != *g.choice.index;
  }
  if (!missing.empty()) {
    a.reason = absl::StrJoin(missing, "; ");
  } else if (differ) {
    a.reason = absl::StrCat(absl::StrJoin(found, ", "), " (the granted ports disagree)");
  } else {
    a.index = first;
  }
  return a;
}

EngineEnv ForGrant(const std::vector<EnvPreset>& presets,
                   const std::vector<const RdmaDevice*>& devices) {
  EngineEnv env;
  if (presets.empty() || devices.empty()) return env;
  std::vector<std::string> names;
  bool any_efa = false, all_efa = true;
  for (const RdmaDevice* d : devices) {
    names.push_back(d->name);
    any_efa = any_efa || d->kind == DeviceKind::kEfa;
    all_efa = all_efa && d->kind == DeviceKind::kEfa;
  }
  const std::string list = absl::StrJoin(names, ",");
  const bool mooncake = Has(presets, EnvPreset::kMooncake);
  const bool nccl = Has(presets, EnvPreset::kNccl);
  GidAgreement gid;
  if (mooncake || nccl) gid = AgreeOnGidIndex(PortGids(devices));
  auto gid_var = [&](const char* name) {
    if (gid.index) {
      env.vars.push_back({name, absl::StrCat(*gid.index)});
    } else {
      env.notes.push_back(absl::StrCat(name, " not set: ", gid.reason));
    }
  };
  if (mooncake) {
    // MOONCAKE_DEVICE names the devices (auto-discovery stays off);
    // MC_MS_FILTERS bounds auto-discovery where the engine forces it on.
    env.vars.push_back({"MOONCAKE_DEVICE", list});
    env.vars.push_back({"MC_MS_FILTERS", list});
    gid_var("MC_GID_INDEX");
  }
  if (nccl) {
    if (all_efa) {
      env.notes.push_back("NCCL_IB_HCA not set: EFA grant (NCCL reaches EFA through aws-ofi-nccl)");
    } else {
      // The leading '=' makes NCCL match names exactly (mlx5_1 is not mlx5_10).
      env.vars.push_back({"NCCL_IB_HCA", "=" + PortList(devices, /*skip_efa=*/true)});
    }
    gid_var("NCCL_IB_GID_INDEX");
  }
  if (Has(presets, EnvPreset::kUcx)) {
    env.vars.push_back({"UCX_NET_DEVICES", PortList(devices, /*skip_efa=*/false)});
  }
  if (Has(presets, EnvPreset::kLibfabric)) {
    if (all_efa) {
      env.vars.push_back({"FI_PROVIDER", "efa"});
    } else {
      env.notes.push_back(any_efa ? "FI_PROVIDER not set: the grant mixes EFA and other devices"
                                  : "FI_PROVIDER not set: it is set for EFA grants only");
    }
  }
  return env;
}

}  // namespace fabric::engine_env
