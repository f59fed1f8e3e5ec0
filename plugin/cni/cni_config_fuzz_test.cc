// Deterministic mutation fuzzing of the stdin/env parser, run in ctest: every
// mutated input must yield either an invocation or a CNI error with a known
// code, and whatever we would print must be a single valid JSON document.
// (test/fuzz/cni_config_fuzzer.cc is the libFuzzer twin, built with FABRIC_FUZZ=ON.)
#include <gtest/gtest.h>

#include <random>

#include "plugin/cni/cni_config.h"

namespace fabric::cni {
namespace {

const std::vector<std::string>& Seeds() {
  static const std::vector<std::string> seeds = {
      R"({"cniVersion":"1.0.0","name":"n","type":"fabric-cni","agentSocket":"/tmp/a.sock","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"10.0.0.2/24","interface":0}]}})",
      R"({"cniVersion":"1.1.0","name":"n","type":"fabric-cni","cni.dev/valid-attachments":[{"containerID":"c","ifname":"eth0"}]})",
      R"({"cniVersion":"0.4.0","name":"n","type":"fabric-cni","timeoutSeconds":5,"logLevel":"debug"})",
      R"({"cniVersion":"0.3.1"})",
      "",
  };
  return seeds;
}

std::string Mutate(std::string s, std::mt19937& rng) {
  static const std::string kTokens[] = {"{",
                                        "}",
                                        "[",
                                        "]",
                                        "\"",
                                        ":",
                                        ",",
                                        "null",
                                        "1e999",
                                        "-0",
                                        "\\u0000",
                                        "\\ud800",
                                        "true",
                                        "\xff",
                                        "\"prevResult\":",
                                        "\"cniVersion\":",
                                        "\"1.1.0\"",
                                        "\"name\":"};
  int n = 1 + rng() % 4;
  for (int i = 0; i < n; ++i) {
    size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0:  // flip a byte
        if (!s.empty()) s[pos % s.size()] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // delete a span
        if (!s.empty()) s.erase(pos % s.size(), 1 + rng() % 8);
        break;
      case 2:  // insert a token
        s.insert(pos, kTokens[rng() % std::size(kTokens)]);
        break;
      case 3:  // truncate
        s.resize(pos);
        break;
      case 4: {  // splice another seed
        const auto& other = Seeds()[rng() % Seeds().size()];
        s.insert(pos, other.substr(0, rng() % (other.size() + 1)));
        break;
      }
    }
  }
  return s;
}

EnvLookup RandomEnv(std::mt19937& rng) {
  static const char* kCommands[] = {"ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION", "", "add"};
  static const char* kArgs[] = {"",      "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", ";;", "=x",
                                "a=b=c", "IgnoreUnknown=1;K8S_POD_NAME"};
  EnvLookup env;
  env["CNI_COMMAND"] = kCommands[rng() % std::size(kCommands)];
  if (rng() % 4) env["CNI_CONTAINERID"] = rng() % 5 ? "abc" : "-bad";
  if (rng() % 4) env["CNI_NETNS"] = "/var/run/netns/x";
  if (rng() % 4) env["CNI_IFNAME"] = rng() % 5 ? "eth0" : "bad/if";
  env["CNI_ARGS"] = kArgs[rng() % std::size(kArgs)];
  return env;
}

TEST(CniConfigFuzzTest, MutatedInputsNeverCrashAndOutputIsJson) {
  std::mt19937 rng(20260101);
  const std::set<int> known = {1, 2, 3, 4, 5, 6, 7, 11, 50, 51, 100, 999};
  int parsed = 0, errors = 0;
  for (int i = 0; i < 30000; ++i) {
    std::string input = Mutate(Seeds()[rng() % Seeds().size()], rng);
    EnvLookup env = RandomEnv(rng);
    auto r = ParseInvocation(env, input);
    std::string out;
    if (auto* e = std::get_if<CniError>(&r)) {
      ++errors;
      ASSERT_TRUE(known.count(e->code)) << e->code;
      ASSERT_FALSE(e->msg.empty());
      out = ErrorJson(*e, "");
    } else {
      ++parsed;
      const auto& inv = std::get<Invocation>(r);
      out = inv.command == Command::kVersion ? VersionJson() : AddResultJson(inv);
    }
    auto j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "input: " << input << "\noutput: " << out;
    ASSERT_TRUE(j.is_object());
  }
  // The mutator must reach both outcomes, or it is not exercising the parser.
  EXPECT_GT(parsed, 500);
  EXPECT_GT(errors, 1000);
}

}  // namespace
}  // namespace fabric::cni
