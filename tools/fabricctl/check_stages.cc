#include "tools/fabricctl/check_stages.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "agent/sysfs/gid_table.h"

namespace fabric::fabricctl {
namespace {

StageView FromOutcome(int number, const char* name, const StageOutcome& o) {
  return StageView{number, name, o.status, o.detail, o.err};
}

// Stage 3's judgement: the table against the engines' variables.
StageView JudgeGid(const FabricDeviceFacts& d, const GidEnv& env) {
  StageView v = FromOutcome(3, "gid", d.gid);
  if (d.gid.status != StageStatus::kOk) return v;
  PortInfo port;
  port.number = d.gid_port;
  for (const PortFacts& p : d.ports) {
    if (p.number == d.gid_port) port.link_layer = p.link_layer;
  }
  port.gids = d.gids;
  const gid::RoceV2Ipv4 choice = gid::FindRoceV2Ipv4(port, d.efa, d.netdevs);
  std::string summary =
      choice.index
          ? fmt::format("port {}: RoCE v2 IPv4 GID index {} ({}{}{})", d.gid_port, *choice.index,
                        choice.ipv4, choice.netdev.empty() ? "" : " on ", choice.netdev)
          : fmt::format("port {}: {}", d.gid_port, choice.reason);
  std::vector<std::string> problems, matched;
  auto judge = [&](const char* name, const std::optional<std::string>& value) {
    if (!value) return;
    if (d.efa) {
      // A mixed grant's variables name its RoCE ports' index: NCCL reaches
      // EFA through aws-ofi-nccl and Mooncake's EFA transport through
      // libfabric, neither of which reads them.
      matched.push_back(fmt::format("{}={}: not used on EFA", name, *value));
      return;
    }
    int index = -1;
    if (absl::SimpleAtoi(*value, &index) && index == -1) {
      // NCCL's default and Mooncake's "unset" (config.h): the engine selects.
      matched.push_back(fmt::format("{}=-1: the engine selects the GID itself", name));
      return;
    }
    if (!absl::SimpleAtoi(*value, &index) || index < 0) {
      problems.push_back(fmt::format("{}='{}' is not a GID index", name, *value));
      return;
    }
    const bool populated = std::any_of(d.gids.begin(), d.gids.end(),
                                       [&](const GidEntry& e) { return e.index == index; });
    if (!populated) {
      problems.push_back(
          fmt::format("{}={} names an empty GID slot (the engine reads a null GID)", name, index));
    } else if (choice.index && index != *choice.index) {
      problems.push_back(
          fmt::format("{}={} but the RoCE v2 IPv4 GID is index {}", name, index, *choice.index));
    } else {
      matched.push_back(fmt::format("{}={} matches", name, index));
    }
  };
  judge("MC_GID_INDEX", env.mc_gid_index);
  judge("NCCL_IB_GID_INDEX", env.nccl_ib_gid_index);
  if (!problems.empty()) {
    v.status = StageStatus::kFailed;
    std::string joined;
    for (const std::string& p : problems) joined += (joined.empty() ? "" : "; ") + p;
    v.message = fmt::format(
        "{} on {} {}: unset it (or -1: the engine selects), or set {} (the agent's mooncake and "
        "nccl-gid-index env presets set it from the granted port)",
        joined, d.ibdev, summary,
        choice.index ? std::to_string(*choice.index) : "a populated index");
    return v;
  }
  v.message = summary;
  for (const std::string& m : matched) v.message += "; " + m;
  return v;
}

StageView JudgeMr(const FabricDeviceFacts& d, const MemlockText& memlock) {
  StageView v = FromOutcome(4, "mr", d.mr);
  if (d.mr.status != StageStatus::kFailed) {
    if (d.mr.status == StageStatus::kOk) {
      v.message =
          fmt::format("registered {} bytes (RLIMIT_MEMLOCK soft {}, hard {}{})", d.mr_bytes,
                      memlock.soft, memlock.hard, memlock.cap_ipc_lock ? ", CAP_IPC_LOCK" : "");
    }
    return v;
  }
  if (IsMemlockErrno(d.mr.err)) {
    v.message = fmt::format(
        "{}: {} with RLIMIT_MEMLOCK soft {}, hard {}, {}: raise the limit (the agent's CDI "
        "memlock hook, --cdi-devices, or memlock unlimited in the container runtime) or grant "
        "IPC_LOCK",
        d.mr.detail, ErrnoString(d.mr.err), memlock.soft, memlock.hard,
        memlock.cap_ipc_lock ? "CAP_IPC_LOCK held" : "no CAP_IPC_LOCK");
  } else {
    v.message = fmt::format("{}: {}: the device or its driver refused the registration",
                            d.mr.detail, ErrnoString(d.mr.err));
  }
  return v;
}

}  // namespace

std::string ErrnoString(int err) {
  if (err == 0) return "";
  const char* name = strerrorname_np(err);
  return fmt::format("{} ({})", name ? name : fmt::format("errno {}", err), std::strerror(err));
}

std::string StageStatusName(StageStatus s) {
  switch (s) {
    case StageStatus::kOk:
      return "ok";
    case StageStatus::kFailed:
      return "failed";
    case StageStatus::kSkipped:
      return "skipped";
  }
  return "?";
}

bool IsMemlockErrno(int err) { return err == ENOMEM || err == EAGAIN; }

std::vector<StageView> StagesOf(const FabricDeviceFacts& d, const GidEnv& env,
                                const MemlockText& memlock) {
  std::vector<StageView> out;
  StageView open = FromOutcome(1, "open", d.open);
  if (open.status == StageStatus::kFailed) {
    if (d.verbs_missing) {
      open.message = fmt::format("{}: an engine cannot open {} either", d.open.detail, d.ibdev);
    } else if (d.open.err == EPERM || d.open.err == EACCES) {
      open.message = fmt::format(
          "{}: {}: this container was not granted {}; request its resource instead of a "
          "hostPath of /dev/infiniband",
          d.open.detail, ErrnoString(d.open.err), d.ibdev);
    } else {
      open.message = fmt::format("{}: {}: stale node or driver not loaded on the host",
                                 d.open.detail, ErrnoString(d.open.err));
    }
  } else if (open.status == StageStatus::kOk) {
    open.message = fmt::format("{} opened", d.ibdev);
  }
  out.push_back(open);

  StageView port = FromOutcome(2, "port", d.port);
  if (d.port.status != StageStatus::kSkipped) {
    std::string ports;
    for (const PortFacts& p : d.ports) {
      ports += fmt::format("{}port {} {} {} MTU {}", ports.empty() ? "" : "; ", p.number, p.state,
                           p.link_layer, p.active_mtu);
    }
    if (d.port.status == StageStatus::kFailed) {
      port.message = fmt::format(
          "{}{}{}: the link is down, or (InfiniBand, INIT) no subnet manager answers; the agent "
          "advertises the device Unhealthy until it is ACTIVE",
          d.port.detail, ports.empty() ? "" : ": ", ports);
    } else {
      port.message = ports;
    }
  }
  out.push_back(port);
  out.push_back(JudgeGid(d, env));
  out.push_back(JudgeMr(d, memlock));

  StageView qp = FromOutcome(5, "qp", d.qp);
  if (d.qp.status == StageStatus::kOk) {
    qp.message = fmt::format("{} QP {} created", d.qp_type, d.qpn);
  } else if (d.qp.status == StageStatus::kFailed) {
    qp.message = fmt::format("{}: {}: the provider cannot create the queues an engine needs",
                             d.qp.detail, ErrnoString(d.qp.err));
  }
  out.push_back(qp);

  StageView lb = FromOutcome(6, "loopback", d.loopback);
  if (d.loopback.status == StageStatus::kOk) {
    lb.message = fmt::format(
        "{} bytes written and sent between two RC QPs on port {}{} in {:.1f} ms", d.loopback_bytes,
        d.gid_port,
        d.loopback_gid_index >= 0 ? fmt::format(" (GID index {})", d.loopback_gid_index) : "",
        d.loopback_seconds * 1e3);
  } else if (d.loopback.status == StageStatus::kFailed) {
    lb.message = fmt::format(
        "{}{}: the data path of port {} does not work (RoCE: the GID's address and route; "
        "InfiniBand: LID and subnet manager)",
        d.loopback.detail, d.loopback.err ? ": " + ErrnoString(d.loopback.err) : "", d.gid_port);
  }
  out.push_back(lb);
  return out;
}

nlohmann::ordered_json FabricDeviceJson(const FabricDeviceFacts& d, const GidEnv& env,
                                        const MemlockText& memlock) {
  using json = nlohmann::ordered_json;
  json stages = json::array();
  for (const StageView& s : StagesOf(d, env, memlock)) {
    json j = {{"stage", s.number},    {"name", s.name}, {"status", StageStatusName(s.status)},
              {"message", s.message}, {"errno", s.err}, {"error", ErrnoString(s.err)}};
    switch (s.number) {
      case 2: {
        json ports = json::array();
        for (const PortFacts& p : d.ports) {
          ports.push_back({{"port", p.number},
                           {"state", p.state},
                           {"link_layer", p.link_layer},
                           {"active_mtu", p.active_mtu},
                           {"lid", p.lid},
                           {"gid_table_len", p.gid_table_len}});
        }
        j["ports"] = ports;
        break;
      }
      case 3: {
        json table = json::array();
        for (const GidEntry& e : d.gids) {
          table.push_back({{"index", e.index},
                           {"gid", e.gid},
                           {"type", std::string(GidTypeName(e.type))},
                           {"netdev", e.netdev}});
        }
        PortInfo port;
        for (const PortFacts& p : d.ports) {
          if (p.number == d.gid_port) port.link_layer = p.link_layer;
        }
        port.gids = d.gids;
        const gid::RoceV2Ipv4 c = gid::FindRoceV2Ipv4(port, d.efa, d.netdevs);
        j["port"] = d.gid_port;
        j["roce_v2_ipv4_index"] = c.index ? json(*c.index) : json(nullptr);
        j["entries"] = table;
        break;
      }
      case 4:
        j["bytes"] = d.mr_bytes;
        j["memlock_soft"] = memlock.soft;
        j["memlock_hard"] = memlock.hard;
        j["cap_ipc_lock"] = memlock.cap_ipc_lock;
        break;
      case 5:
        j["qp_type"] = d.qp_type;
        j["qpn"] = d.qpn;
        break;
      case 6:
        j["bytes"] = d.loopback_bytes;
        j["seconds"] = d.loopback_seconds;
        j["gid_index"] = d.loopback_gid_index >= 0 ? json(d.loopback_gid_index) : json(nullptr);
        break;
      default:
        break;
    }
    stages.push_back(std::move(j));
  }
  return json{{"device", d.ibdev}, {"node", d.node}, {"efa", d.efa}, {"stages", stages}};
}

std::string FabricText(const std::vector<FabricDeviceFacts>& devices, const std::string& skipped,
                       const GidEnv& env, const MemlockText& memlock) {
  if (devices.empty()) return "";
  std::string out = "fabric (libibverbs), per device and stage:\n";
  if (!skipped.empty()) out += "  (" + skipped + ")\n";
  for (const FabricDeviceFacts& d : devices) {
    out += fmt::format("  {} ({})\n", d.ibdev.empty() ? "?" : d.ibdev, d.node);
    for (const StageView& s : StagesOf(d, env, memlock)) {
      out += fmt::format("    {} {:<9} {:<8} {}\n", s.number, s.name, StageStatusName(s.status),
                         s.message);
    }
  }
  return out;
}

}  // namespace fabric::fabricctl
