#include "agent/cni_service/attachment_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "agent/base/file_util.h"
#include "test/testing/status_matchers.h"

namespace fabric::cni_service {
namespace {

class AttachmentStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cnistXXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string dir_;
};

TEST_F(AttachmentStoreTest, RoundTripsAndRemovesIdempotently) {
  AttachmentStore store(dir_ + "/cni");
  AttachmentRecord rec;
  rec.key = {"net/../x", "abc123", "eth0"};  // hostile network name stays inside dir
  rec.netns = "/run/netns/p";
  rec.pod_namespace = "ns";
  rec.pod_name = "pod";
  rec.netns_mode = "exclusive";
  rec.devices.push_back(
      {"main", "fabric.io/rdma", "0000:01:00.1", "mlx5_1", DeviceAction::kMoved, "moved"});
  rec.warnings = {"w1"};
  ASSERT_OK(store.Save(rec));
  auto names = ListDir(dir_ + "/cni");
  ASSERT_OK(names.status());
  ASSERT_EQ(names->size(), 1u);
  EXPECT_EQ((*names)[0].find('/'), std::string::npos);

  auto loaded = store.Load(rec.key);
  ASSERT_OK(loaded.status());
  ASSERT_TRUE(loaded->has_value());
  const AttachmentRecord& r = **loaded;
  EXPECT_EQ(r.key.network_name, "net/../x");
  EXPECT_EQ(r.netns, "/run/netns/p");
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].action, DeviceAction::kMoved);
  EXPECT_EQ(r.devices[0].rdma_device, "mlx5_1");
  EXPECT_EQ(r.warnings, std::vector<std::string>{"w1"});

  ASSERT_OK(store.Remove(rec.key));
  ASSERT_OK(store.Remove(rec.key));
  auto gone = store.Load(rec.key);
  ASSERT_OK(gone.status());
  EXPECT_FALSE(gone->has_value());
}

TEST_F(AttachmentStoreTest, LoadAllSkipsCorruptAndTempFiles) {
  AttachmentStore store(dir_);
  AttachmentRecord rec;
  rec.key = {"net", "c1", "eth0"};
  ASSERT_OK(store.Save(rec));
  std::ofstream(dir_ + "/broken.json") << "{not json";
  std::ofstream(dir_ + "/net-c2-eth0.json.tmp.123") << "{}";
  auto all = store.LoadAll();
  ASSERT_OK(all.status());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].key.container_id, "c1");
}

TEST_F(AttachmentStoreTest, MissingDirIsEmpty) {
  AttachmentStore store(dir_ + "/nope");
  auto all = store.LoadAll();
  ASSERT_OK(all.status());
  EXPECT_TRUE(all->empty());
}

}  // namespace
}  // namespace fabric::cni_service
