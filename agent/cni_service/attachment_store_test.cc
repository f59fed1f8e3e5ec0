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

// ("a-b", "c") and ("a", "b-c") are two attachments: one must not overwrite,
// load or remove the other's record.
TEST_F(AttachmentStoreTest, KeysThatJoinToTheSameTextDoNotCollide) {
  AttachmentStore store(dir_);
  AttachmentRecord one, two;
  one.key = {"a-b", "c", "eth0"};
  one.pod_name = "one";
  two.key = {"a", "b-c", "eth0"};
  two.pod_name = "two";
  ASSERT_OK(store.Save(one));
  ASSERT_OK(store.Save(two));
  auto all = store.LoadAll();
  ASSERT_OK(all.status());
  EXPECT_EQ(all->size(), 2u);
  auto l1 = store.Load(one.key);
  ASSERT_OK(l1.status());
  ASSERT_TRUE(l1->has_value());
  EXPECT_EQ((*l1)->pod_name, "one");
  ASSERT_OK(store.Remove(two.key));
  l1 = store.Load(one.key);
  ASSERT_OK(l1.status());
  ASSERT_TRUE(l1->has_value());
  EXPECT_EQ((*l1)->pod_name, "one");
  auto l2 = store.Load(two.key);
  ASSERT_OK(l2.status());
  EXPECT_FALSE(l2->has_value());
}

// A record written by the first format (parts joined by an unescaped '-') is
// still found, checked against its key, and moved to the new name on save.
TEST_F(AttachmentStoreTest, ReadsAndMigratesLegacyFileNames) {
  AttachmentStore store(dir_);
  std::ofstream(dir_ + "/a-b-c-eth0.json")
      << R"({"version":1,"networkName":"a-b","containerID":"c","ifname":"eth0","podName":"old"})";
  auto other = store.Load({"a", "b-c", "eth0"});  // same legacy name, other key
  ASSERT_OK(other.status());
  EXPECT_FALSE(other->has_value());
  auto rec = store.Load({"a-b", "c", "eth0"});
  ASSERT_OK(rec.status());
  ASSERT_TRUE(rec->has_value());
  EXPECT_EQ((*rec)->pod_name, "old");
  ASSERT_OK(store.Save(**rec));
  auto names = ListDir(dir_);
  ASSERT_OK(names.status());
  ASSERT_EQ(names->size(), 1u);
  EXPECT_NE((*names)[0], "a-b-c-eth0.json");
  ASSERT_OK(store.Remove((*rec)->key));
  EXPECT_TRUE(ListDir(dir_)->empty());
}

TEST_F(AttachmentStoreTest, VeryLongKeysStayWithinNameMax) {
  AttachmentStore store(dir_);
  AttachmentRecord rec;
  rec.key = {std::string(300, '-'), "c", "eth0"};
  ASSERT_OK(store.Save(rec));
  auto names = ListDir(dir_);
  ASSERT_OK(names.status());
  ASSERT_EQ(names->size(), 1u);
  EXPECT_LE((*names)[0].size(), 255u);
  auto back = store.Load(rec.key);
  ASSERT_OK(back.status());
  EXPECT_TRUE(back->has_value());
}

}  // namespace
}  // namespace fabric::cni_service
