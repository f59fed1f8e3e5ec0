// The agent's config file (agent/config/config.h), YAML or JSON from --config.
// Input: the file's text.
// Invariant: ParseConfig never throws (no yaml-cpp exception escapes) and
// fails only with kInvalidArgument; a config it accepts is valid (every pool
// name passes ValidateResourceName, names are unique, tokensPerDevice is in
// range, counter names are file names), and written back out as JSON (a
// subset of YAML, what the docs allow) it parses again to the same config.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "absl/strings/str_format.h"
#include "agent/config/config.h"
#include "test/fuzz/fuzz_check.h"

namespace {

using fabric::Config;
using nlohmann::ordered_json;

ordered_json HexIds(const std::vector<uint32_t>& ids) {
  ordered_json out = ordered_json::array();
  for (uint32_t id : ids) out.push_back(absl::StrFormat("0x%04x", id));
  return out;
}

// The config file that means `c`: every field written out.
ordered_json ToJson(const Config& c) {
  ordered_json pools = ordered_json::array();
  for (const fabric::PoolConfig& p : c.pools) {
    ordered_json pool = {{"name", p.name}, {"mode", fabric::PoolModeName(p.mode)}};
    if (p.mode == fabric::PoolMode::kShared) pool["tokensPerDevice"] = p.tokens_per_device;
    const fabric::Selector& s = p.selector;
    ordered_json sel = ordered_json::object();
    ordered_json kinds = ordered_json::array();
    for (fabric::DeviceKind k : s.kinds)
      kinds.push_back(k == fabric::DeviceKind::kEfa ? "efa" : "rdma");
    sel["kinds"] = kinds;
    sel["vendors"] = HexIds(s.vendors);
    sel["deviceIDs"] = HexIds(s.device_ids);
    sel["drivers"] = s.drivers;
    sel["ibdevNames"] = s.ibdev_names;
    sel["netdevNames"] = s.netdev_names;
    sel["linkTypes"] = s.link_types;
    sel["pciAddresses"] = s.pci_addresses;
    if (s.is_vf) sel["isVF"] = *s.is_vf;
    if (s.has_vfs) sel["hasVFs"] = *s.has_vfs;
    pool["selector"] = sel;
    pools.push_back(pool);
  }
  ordered_json counters = ordered_json::object();
  for (const auto& ctr : c.health.efa.error_counters) counters[ctr.name] = ctr.threshold;
  return {{"pools", pools},
          {"health",
           {{"pollIntervalMs", c.health.poll_interval_ms},
            {"portHoldDownMs", c.health.port_hold_down_ms},
            {"efa",
             {{"errorCounters", counters},
              {"checkIntervalMs", c.health.efa.check_interval_ms},
              {"quietPeriodMs", c.health.efa.quiet_period_ms}}}}}};
}

void CheckValid(const Config& c) {
  std::set<std::string> names;
  for (const fabric::PoolConfig& p : c.pools) {
    FUZZ_CHECK(fabric::ValidateResourceName(p.name).ok());
    FUZZ_CHECK(names.insert(p.name).second);
    FUZZ_CHECK(p.tokens_per_device >= 1 && p.tokens_per_device <= 1000);
  }
  std::set<std::string> counters;
  for (const auto& ctr : c.health.efa.error_counters) {
    FUZZ_CHECK(!ctr.name.empty() && ctr.name.find('/') == std::string::npos);
    FUZZ_CHECK(ctr.threshold >= 1);
    FUZZ_CHECK(counters.insert(ctr.name).second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Config> c = fabric::ParseConfig(text, "fuzz.yaml");
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  CheckValid(*c);
  std::string out;
  try {
    out = ToJson(*c).dump(2);
  } catch (const nlohmann::json::type_error&) {
    // A string that is not UTF-8 (YAML allows none, yaml-cpp passes bytes
    // through): JSON cannot carry it, so there is no file to re-read.
    return 0;
  }
  absl::StatusOr<Config> again = fabric::ParseConfig(out, "fuzz.json");
  if (!again.ok())
    std::fprintf(stderr, "re-parse: %s\n%s\n", again.status().ToString().c_str(), out.c_str());
  FUZZ_CHECK(again.ok());
  const std::string out2 = ToJson(*again).dump(2);
  if (out2 != out) std::fprintf(stderr, "first:\n%s\nagain:\n%s\n", out.c_str(), out2.c_str());
  FUZZ_CHECK(out2 == out);
  return 0;
}
