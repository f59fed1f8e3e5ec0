#include "plugin/dra/claim_allocation.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "test/fakes/fake_claim_allocations.h"
#include "test/testing/status_matchers.h"

namespace fabric::dra {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

json Claim() {
  return json::parse(R"({
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
    "metadata": {"name": "pair", "namespace": "team-a", "uid": "u-1", "resourceVersion": "7"},
    "spec": {"devices": {"requests": [{"name": "efa", "exactly": {"deviceClassName": "efa.fabric.gpustack.ai", "count": 2}}]}},
    "status": {
      "allocation": {
        "devices": {"results": [
          {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-0"},
          {"request": "efa", "driver": "fabric.gpustack.ai", "pool": "node-1", "device": "rdmap79s0"},
          {"request": "efa", "driver": "fabric.gpustack.ai", "pool": "node-1", "device": "rdmap80s0"}
        ]},
        "nodeSelector": {"nodeSelectorTerms": []}
      },
      "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]
    }})");
}

absl::StatusOr<ClaimAllocation> Parse(const std::string& text, const std::string& uid = "u-1") {
  return ParseClaimAllocation(text, "team-a", "pair", uid, kDriverName, "node-1");
}

TEST(ClaimAllocationTest, KeepsOurResultsInOrder) {
  auto a = Parse(Claim().dump());
  ASSERT_OK(a.status());
  EXPECT_EQ(a->uid, "u-1");
  EXPECT_THAT(a->results, ElementsAre(AllocationResult{"efa", kDriverName, "node-1", "rdmap79s0"},
                                      AllocationResult{"efa", kDriverName, "node-1", "rdmap80s0"}));
}

TEST(ClaimAllocationTest, UidMismatchIsRefused) {
  auto a = Parse(Claim().dump(), "u-2");
  EXPECT_THAT(a.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("team-a/pair"));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("u-2"));
}

TEST(ClaimAllocationTest, NotAllocatedIsRefused) {
  json c = Claim();
  c["status"].erase("allocation");
  EXPECT_THAT(std::string(Parse(c.dump()).status().message()), HasSubstr("not allocated"));
  c.erase("status");
  EXPECT_THAT(std::string(Parse(c.dump()).status().message()), HasSubstr("not allocated"));
  c["status"] = {{"allocation", nullptr}};
  EXPECT_THAT(std::string(Parse(c.dump()).status().message()), HasSubstr("not allocated"));
}

TEST(ClaimAllocationTest, AnotherNodesPoolIsRefused) {
  json c = Claim();
  c["status"]["allocation"]["devices"]["results"][2]["pool"] = "node-2";
  auto a = Parse(c.dump());
  EXPECT_THAT(a.status(), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("node-2"));
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("another node"));
  // Another driver's device in another pool is none of our business.
  c = Claim();
  c["status"]["allocation"]["devices"]["results"][0]["pool"] = "elsewhere";
  EXPECT_OK(Parse(c.dump()).status());
}

TEST(ClaimAllocationTest, NoResultOfOursIsRefused) {
  json c = Claim();
  auto& results = c["status"]["allocation"]["devices"]["results"];
  results.erase(2);
  results.erase(1);
  EXPECT_THAT(std::string(Parse(c.dump()).status().message()),
              HasSubstr("no device of driver fabric.gpustack.ai"));
}

TEST(ClaimAllocationTest, HostileInputIsRefusedWithAClearError) {
  struct Case {
    std::string text;
    std::string want;
  };
  json wrong_type = Claim();
  wrong_type["status"]["allocation"]["devices"]["results"] = "nope";
  json result_not_object = Claim();
  result_not_object["status"]["allocation"]["devices"]["results"][1] = 5;
  json device_number = Claim();
  device_number["status"]["allocation"]["devices"]["results"][1]["device"] = 12;
  json control_char = Claim();
  control_char["status"]["allocation"]["devices"]["results"][1]["device"] = "rdma\n0";
  json too_long = Claim();
  too_long["status"]["allocation"]["devices"]["results"][1]["device"] = std::string(300, 'a');
  json empty_device = Claim();
  empty_device["status"]["allocation"]["devices"]["results"][1]["device"] = "";
  json many = Claim();
  for (int i = 0; i < 300; ++i)
    many["status"]["allocation"]["devices"]["results"].push_back(
        many["status"]["allocation"]["devices"]["results"][1]);
  json uid_number = Claim();
  uid_number["metadata"]["uid"] = 1;
  json other_name = Claim();
  other_name["metadata"]["name"] = "other";
  std::string bad_utf8 = Claim().dump();
  bad_utf8.replace(bad_utf8.find("rdmap80s0"), 9, "rdma\xc3\x28s0xx");
  for (const Case& c : std::vector<Case>{
           {"", "not valid JSON"},
           {"{", "not valid JSON"},
           {"[]", "not a JSON object"},
           {"null", "not a JSON object"},
           {"{\"metadata\": 3}", "no metadata"},
           {std::string(5u << 20, ' '), "larger than"},
           {std::string(100000, '['), "not valid JSON"},
           {wrong_type.dump(), "results is not a list"},
           {result_not_object.dump(), "results[1] is not an object"},
           {device_number.dump(), "results[1].device is not a string"},
           {control_char.dump(), "results[1].device"},
           {too_long.dump(), "results[1].device"},
           {empty_device.dump(), "results[1].device is empty"},
           {many.dump(), "at most 256"},
           {uid_number.dump(), "metadata.uid is not a string"},
           {other_name.dump(), "answered for team-a/other"},
           {bad_utf8, "not valid JSON"},
       }) {
    auto a = Parse(c.text);
    ASSERT_FALSE(a.ok()) << c.text.substr(0, 80);
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(c.want)) << c.text.substr(0, 80);
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("ResourceClaim team-a/pair"));
  }
}

TEST(ClaimAllocationTest, FakeAnswersWhatWasSet) {
  FakeClaimAllocations fake;
  fake.Set({"ns", "c", "u", {{"r", kDriverName, "node-1", "d"}}});
  EXPECT_OK(fake.Get("ns", "c", "u").status());
  EXPECT_THAT(fake.Get("ns", "c", "other").status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(fake.Get("ns", "missing", "u").status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(fake.calls(), 3);
}

}  // namespace
}  // namespace fabric::dra
