#include "agent/podresources/kubelet_checkpoint.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"
#include "test/testing/test_dirs.h"

namespace fabric::podresources {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// As the real kubelet v1.20.2 wrote it (test/realkubelet case 2), trimmed.
constexpr char kV120[] = R"({"Data":{"PodDeviceEntries":[
 {"PodUID":"7d1c","ContainerName":"c","ResourceName":"vpc.amazonaws.com/efa",
  "DeviceIDs":{"0":["rdmap79s0"],"1":["rdmap80s0","rdmap79s0"]},"AllocResp":"CgA="},
 {"PodUID":"7d1c","ContainerName":"init","ResourceName":"device.gpustack.ai/rdma.shared",
  "DeviceIDs":{"-1":["ibp115s0f0.t00"]},"AllocResp":"CgA="}],
 "RegisteredDevices":{"vpc.amazonaws.com/efa":["rdmap79s0","rdmap80s0"]}},"Checksum":3854436589})";

TEST(KubeletCheckpointTest, ReadsTheV120ShapeWithInitContainers) {
  auto parsed = ParseKubeletCheckpoint(kV120);
  ASSERT_OK(parsed);
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].pod_uid, "7d1c");
  EXPECT_EQ((*parsed)[0].container, "c");
  EXPECT_THAT((*parsed)[0].device_ids, ElementsAre("rdmap79s0", "rdmap80s0"));
  EXPECT_EQ((*parsed)[1].container, "init");
  EXPECT_EQ((*parsed)[1].resource, "device.gpustack.ai/rdma.shared");
  EXPECT_TRUE((*parsed)[0].ns.empty() && (*parsed)[0].pod.empty());
}

TEST(KubeletCheckpointTest, ReadsThePreV120ListShapeAndEmptyCheckpoints) {
  auto parsed = ParseKubeletCheckpoint(
      R"({"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r",)"
      R"("DeviceIDs":["a","b"],"AllocResp":null}],"RegisteredDevices":{}},"Checksum":1})");
  ASSERT_OK(parsed);
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_THAT((*parsed)[0].device_ids, ElementsAre("a", "b"));
  auto empty = ParseKubeletCheckpoint(
      R"({"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":0})");
  ASSERT_OK(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(KubeletCheckpointTest, RejectsWhatIsNotTheKubeletsShapeWithoutThrowing) {
  for (
      const char* bad :
      {"", "[]", "{", R"({"Data":[]})", R"({"Data":{"PodDeviceEntries":{}}})",
       R"({"Data":{"PodDeviceEntries":[1]}})", R"({"Data":{"PodDeviceEntries":[{"PodUID":1}]}})",
       R"({"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":{"0":"a"}}]}})",
       R"({"Data":{"PodDeviceEntries":[{"PodUID":"u","ContainerName":"c","ResourceName":"r","DeviceIDs":[7]}]}})"}) {
    auto parsed = ParseKubeletCheckpoint(bad);
    EXPECT_THAT(parsed.status(), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  auto bad_utf8 = ParseKubeletCheckpoint(
      "{\"Data\":{\"PodDeviceEntries\":[{\"PodUID\":\"u\",\"ContainerName\":\"c\xff\","
      "\"ResourceName\":\"r\",\"DeviceIDs\":[\"a\"]}]}}");
  EXPECT_FALSE(bad_utf8.ok());
}

TEST(KubeletCheckpointTest, ReaderReparsesOnlyWhenTheFileChanges) {
  testing::TempDir dir("ckpt");
  const std::string path = dir.path() + "/kubelet_internal_checkpoint";
  KubeletCheckpointReader reader(path);
  EXPECT_THAT(reader.Read().status(), StatusIs(absl::StatusCode::kNotFound));
  { std::ofstream(path) << kV120; }
  auto first = reader.Read();
  ASSERT_OK(first);
  EXPECT_EQ(first->size(), 2u);
  // The kubelet writes a new file and renames it over the old one.
  { std::ofstream(path + ".tmp") << R"({"Data":{"PodDeviceEntries":[]},"Checksum":0})"; }
  ASSERT_EQ(std::rename((path + ".tmp").c_str(), path.c_str()), 0);
  auto second = reader.Read();
  ASSERT_OK(second);
  EXPECT_TRUE(second->empty());
  { std::ofstream(path) << "{not json"; }
  EXPECT_THAT(reader.Read().status().message(), HasSubstr("not JSON"));
}

}  // namespace
}  // namespace fabric::podresources
