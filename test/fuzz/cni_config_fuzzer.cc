// The CNI plugin's stdin/env parser (plugin/cni/cni_config.h), the bytes a
// container runtime hands fabric-cni. cni_config_fuzz_test.cc is its
// always-on ctest twin.
// Input: the first byte picks CNI_COMMAND, the rest is stdin.
// Invariant: ParseInvocation never throws; it yields an Invocation or a CNI
// error with a documented code; whatever fabric-cni would print for it (the
// result or the error) is one JSON document that re-parses.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "plugin/cni/cni_config.h"
#include "test/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* kCommands[] = {"ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"};
  static const std::set<int> kCodes = {fabric::cni::kErrIncompatibleVersion,
                                       fabric::cni::kErrUnsupportedField,
                                       fabric::cni::kErrUnknownContainer,
                                       fabric::cni::kErrInvalidEnvironment,
                                       fabric::cni::kErrIoFailure,
                                       fabric::cni::kErrDecodingFailure,
                                       fabric::cni::kErrInvalidNetworkConfig,
                                       fabric::cni::kErrTryAgainLater,
                                       fabric::cni::kErrPluginNotAvailable,
                                       fabric::cni::kErrPluginNotAvailableLimitedConnectivity,
                                       fabric::cni::kErrDeviceNetns,
                                       fabric::cni::kErrInternal};
  if (size == 0) return 0;
  fabric::cni::EnvLookup env = {{"CNI_COMMAND", kCommands[data[0] % 6]},
                                {"CNI_CONTAINERID", "abc"},
                                {"CNI_NETNS", "/var/run/netns/x"},
                                {"CNI_IFNAME", "eth0"},
                                {"CNI_ARGS", "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p"}};
  std::string in(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = fabric::cni::ParseInvocation(env, in);
  std::string out;
  if (auto* e = std::get_if<fabric::cni::CniError>(&r)) {
    FUZZ_CHECK(kCodes.count(e->code) == 1);
    out = fabric::cni::ErrorJson(*e, "");
  } else {
    out = fabric::cni::AddResultJson(std::get<fabric::cni::Invocation>(r));
  }
  FUZZ_CHECK(!nlohmann::json::parse(out, nullptr, false).is_discarded());
  return 0;
}
