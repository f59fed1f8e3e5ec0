// libFuzzer target for the CNI stdin/env parser (built with clang when
// FABRIC_CNI_FUZZER=ON; cni_config_fuzz_test.cc is the always-on ctest twin).
// Input: first byte picks CNI_COMMAND, the rest is stdin.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "plugin/cni/cni_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* kCommands[] = {"ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION"};
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
    out = fabric::cni::ErrorJson(*e, "");
  } else {
    out = fabric::cni::AddResultJson(std::get<fabric::cni::Invocation>(r));
  }
  if (nlohmann::json::parse(out, nullptr, false).is_discarded()) std::abort();
  return 0;
}
