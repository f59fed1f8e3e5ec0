// What GID index each grant's engine environment carried, and whether that
// index still names the same GID (issue 32, item 12).
//
// MC_GID_INDEX / NCCL_IB_GID_INDEX are fixed when Allocate answers: the
// container's environment cannot be changed afterwards. When the address
// behind that index leaves the port's GID table (a DHCP renew, a VIP moved
// away), the index names an empty slot or another address, and the engine's
// next connection fails ("GID is NULL") or uses the wrong address. The agent
// sees the table change; the ledger remembers what was given so /v1/node, the
// Pod's observed transport evidence and fabric_pod_gid_index_stale can say so.
//
// One ledger per pool (PoolState::gid_ledger). An exclusive pool's device has
// one holder at a time: its newest grant's value is that holder's. A shared
// pool's device may hold values given at different times: each distinct value
// is kept, and a holder's value is known only while they all agree.
#ifndef FABRIC_AGENT_ENGINE_ENV_GID_LEDGER_H_
#define FABRIC_AGENT_ENGINE_ENV_GID_LEDGER_H_

#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "agent/model/device.h"

namespace fabric::engine_env {

// One port's RoCE v2 IPv4 GID as a grant's variables named it.
struct GivenGid {
  std::string device;
  int port = 0;
  int index = 0;
  std::string gid;   // the table's text at `index` when given
  std::string ipv4;  // "10.0.2.15"
  std::string netdev;
  std::vector<std::string> variables;          // "MC_GID_INDEX", "NCCL_IB_GID_INDEX"
  absl::Time given_at = absl::InfinitePast();  // wall clock, for the documents
  absl::Time given_mono = absl::InfinitePast();
  bool SameValue(const GivenGid& o) const {
    return device == o.device && port == o.port && index == o.index && gid == o.gid;
  }
};

// "MC_GID_INDEX=3 (10.0.2.15 on eth0)".
std::string GivenText(const GivenGid& g);

// Why `g`'s index no longer names its GID in `live` (the device as the
// inventory has it now), or "" when it still does. A device or port no
// longer present is not a GID change: "" too (its health says what happened).
std::string WhyGone(const GivenGid& g, const RdmaDevice* live);

class GidLedger {
 public:
  using Clock = std::function<absl::Time()>;
  explicit GidLedger(Clock mono = nullptr, Clock wall = nullptr);

  // What one Allocate's grant carried (EngineEnv::given). In an exclusive
  // pool a device's newest grant replaces what it had. Thread-safe.
  void Record(const std::vector<GivenGid>& given, bool exclusive);

  // The kept values, after dropping those of devices `held` does not name
  // that were given longer than `settle` ago (a grant shows in the kubelet's
  // view within seconds; one that never does was not taken up).
  std::vector<GivenGid> Current(const std::set<std::string>& held,
                                absl::Duration settle = absl::Seconds(60));

 private:
  Clock mono_, wall_;
  std::mutex mu_;
  std::vector<GivenGid> given_;  // guarded by mu_
};

// The value a holder of `device` got on `port`, where the ledger can tell:
// exactly one distinct value kept for that port. nullopt otherwise (nothing
// given, or several values on a shared device).
std::optional<GivenGid> HolderValue(const std::vector<GivenGid>& current, const std::string& device,
                                    int port);

// For a holder of `live`: per port whose value can be told (HolderValue),
// why it no longer names its GID, "; "-joined; "" when every one still does.
std::string HolderGidGone(const std::vector<GivenGid>& current, const RdmaDevice& live);

}  // namespace fabric::engine_env

#endif  // FABRIC_AGENT_ENGINE_ENV_GID_LEDGER_H_
