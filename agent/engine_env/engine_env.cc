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

std::vector<PortGid> PortGids(const std::vector<const RdmaDevice*>& devices, bool skip_efa) {
  std::vector<PortGid> out;
  for (const RdmaDevice* d : devices) {
    const bool efa = d->kind == DeviceKind::kEfa;
    if (skip_efa && efa) continue;
    for (const PortInfo& p : d->ports) {
      out.push_back({d->name, p.number, gid::FindRoceV2Ipv4(p, efa, d->netdevs)});
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
  const bool nccl_gid = Has(presets, EnvPreset::kNcclGidIndex);
  // One GID index variable for `gids`, and what it named per port.
  auto gid_var = [&](const char* name, const std::vector<PortGid>& gids) {
    const GidAgreement a = AgreeOnGidIndex(gids);
    if (!a.index) {
      env.notes.push_back(absl::StrCat(name, " not set: ", a.reason));
      return;
    }
    env.vars.push_back({name, absl::StrCat(*a.index)});
    for (const PortGid& g : gids) {
      auto same = std::find_if(env.given.begin(), env.given.end(), [&](const GivenGid& k) {
        return k.device == g.device && k.port == g.port;
      });
      if (same == env.given.end()) {
        env.given.push_back(
            {g.device, g.port, *g.choice.index, g.choice.gid, g.choice.ipv4, g.choice.netdev, {}});
        same = env.given.end() - 1;
      }
      same->variables.push_back(name);
    }
  };
  if (mooncake) {
    // MOONCAKE_DEVICE names the devices (auto-discovery stays off);
    // MC_MS_FILTERS bounds auto-discovery where the engine forces it on.
    env.vars.push_back({"MOONCAKE_DEVICE", list});
    env.vars.push_back({"MC_MS_FILTERS", list});
    gid_var("MC_GID_INDEX", PortGids(devices));
  }
  if (nccl) {
    if (all_efa) {
      env.notes.push_back("NCCL_IB_HCA not set: EFA grant (NCCL reaches EFA through aws-ofi-nccl)");
    } else {
      // The leading '=' makes NCCL match names exactly (mlx5_1 is not mlx5_10).
      env.vars.push_back({"NCCL_IB_HCA", "=" + PortList(devices, /*skip_efa=*/true)});
    }
  }
  if (nccl_gid) {
    // The ports NCCL_IB_HCA names: an EFA device is NCCL's through
    // aws-ofi-nccl, which reads no GID index.
    if (all_efa) {
      env.notes.push_back("NCCL_IB_GID_INDEX not set: EFA grant (no RoCE GID to name)");
    } else {
      gid_var("NCCL_IB_GID_INDEX", PortGids(devices, /*skip_efa=*/true));
    }
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
