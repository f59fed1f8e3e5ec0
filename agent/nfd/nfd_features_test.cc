#include "agent/nfd/nfd_features.h"

#include <sys/stat.h>

#include <cstdlib>

#include "agent/base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric::nfd {
namespace {

TEST(NfdFeaturesTest, CountsEachKindAndSkipsUnchangedContent) {
  NodeInventory inv;
  inv.devices.resize(3);
  inv.devices[0].kind = DeviceKind::kEfa;
  inv.devices[1].kind = DeviceKind::kEfa;
  inv.devices[2].kind = DeviceKind::kRdma;
  const std::string text = RenderFeatures(inv);
  EXPECT_THAT(text, ::testing::HasSubstr("fabric-efa.present=true\nfabric-efa.count=2\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("fabric-rdma.present=true\nfabric-rdma.count=1\n"));
  EXPECT_THAT(RenderFeatures({}), ::testing::HasSubstr("fabric-efa.present=false\n"));

  char tmpl[] = "/tmp/fabric-nfd-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/fabric.features";
  ASSERT_OK(WriteFeatures(path, inv));
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  ASSERT_OK(WriteFeatures(path, inv));  // same content: not rewritten
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(*ReadFile(path), text);
  std::system((std::string("rm -rf ") + tmpl).c_str());
}

}  // namespace
}  // namespace fabric::nfd
