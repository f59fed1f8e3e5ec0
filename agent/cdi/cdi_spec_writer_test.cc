#include "agent/cdi/cdi_spec_writer.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "agent/base/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test/testing/status_matchers.h"

namespace fabric::cdi {
namespace {

using ::testing::ElementsAre;

class CdiSpecWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cdi_writer_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    cdi_dir_ = root_ + "/run/cdi";
    state_dir_ = root_ + "/state";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static CdiDevice Device(const std::string& name, int minor) {
    DeviceNode n;
    n.path = "/dev/infiniband/uverbs" + std::to_string(minor - 192);
    n.major = 231;
    n.minor = minor;
    return CdiDevice{name, {n}, {"FABRIC_DEVICES=" + name}};
  }
  static CdiSpecInput Input(std::vector<CdiDevice> devices) {
    CdiSpecInput in;
    in.kind = "example.com/rdma";
    in.devices = std::move(devices);
    in.memlock_hook = MemlockHook("/opt/fabric/bin/fabric-memlock-hook", "unlimited");
    return in;
  }
  std::vector<std::string> WrittenNames(const CdiSpecWriter& w) const {
    absl::StatusOr<std::string> text = ReadFile(w.SpecPath("example.com/rdma"));
    if (!text.ok()) return {"<missing>"};
    absl::StatusOr<CdiSpecInput> parsed = ParseSpec(*text);
    if (!parsed.ok()) return {"<unparsable>"};
    std::vector<std::string> names;
    for (const CdiDevice& d : parsed->devices) names.push_back(d.name);
    return names;
  }

  std::string root_, cdi_dir_, state_dir_;
};

TEST_F(CdiSpecWriterTest, WritesSpecFileAtomicallyWithNoLeftovers) {
  CdiSpecWriter w(cdi_dir_, state_dir_);
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 192), Device("mlx5_1", 193)}), {}));
  EXPECT_EQ(w.SpecPath("example.com/rdma"), cdi_dir_ + "/example.com-rdma.json");
  EXPECT_THAT(WrittenNames(w), ElementsAre("mlx5_0", "mlx5_1"));
  absl::StatusOr<std::vector<std::string>> files = ListDir(cdi_dir_);
  ASSERT_OK(files);
  EXPECT_THAT(*files, ElementsAre("example.com-rdma.json"));  // no temp files left
  struct stat st;
  ASSERT_EQ(::stat(w.SpecPath("example.com/rdma").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST_F(CdiSpecWriterTest, DropsUnreferencedDevicesKeepsReferencedOnes) {
  CdiSpecWriter w(cdi_dir_, state_dir_);
  ASSERT_OK(
      w.Update(Input({Device("mlx5_0", 192), Device("mlx5_1", 193), Device("mlx5_2", 194)}), {}));
  // mlx5_1 and mlx5_2 left the pool; a live Pod still holds mlx5_1.
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 192)}), {"mlx5_1"}));
  EXPECT_THAT(WrittenNames(w), ElementsAre("mlx5_0", "mlx5_1"));
  absl::StatusOr<CdiSpecInput> parsed = ParseSpec(*ReadFile(w.SpecPath("example.com/rdma")));
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->devices[1].nodes[0].minor, 193u);  // its last written node
  EXPECT_THAT(parsed->devices[1].env, ElementsAre("FABRIC_DEVICES=mlx5_1"));

  // The Pod is gone: the entry goes too.
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 192)}), {}));
  EXPECT_THAT(WrittenNames(w), ElementsAre("mlx5_0"));
}

TEST_F(CdiSpecWriterTest, ReferencedEntriesSurviveAgentRestartAndLostCdiDir) {
  {
    CdiSpecWriter w(cdi_dir_, state_dir_);
    ASSERT_OK(w.Update(Input({Device("mlx5_0", 192), Device("mlx5_1", 193)}), {}));
  }
  // Reboot: /var/run/cdi is tmpfs and empty; the state dir persisted.
  std::filesystem::remove_all(cdi_dir_);
  CdiSpecWriter restarted(cdi_dir_, state_dir_);
  ASSERT_OK(restarted.Update(Input({Device("mlx5_0", 192)}), {"mlx5_1", "never_written"}));
  EXPECT_THAT(WrittenNames(restarted), ElementsAre("mlx5_0", "mlx5_1"));
}

TEST_F(CdiSpecWriterTest, RecoversFromSpecFileWhenStateIsMissing) {
  {
    CdiSpecWriter w(cdi_dir_, state_dir_);
    ASSERT_OK(w.Update(Input({Device("mlx5_0", 192), Device("mlx5_1", 193)}), {}));
  }
  std::filesystem::remove_all(state_dir_);
  CdiSpecWriter restarted(cdi_dir_, state_dir_);
  ASSERT_OK(restarted.Update(Input({Device("mlx5_0", 192)}), {"mlx5_1"}));
  EXPECT_THAT(WrittenNames(restarted), ElementsAre("mlx5_0", "mlx5_1"));
}

TEST_F(CdiSpecWriterTest, NewNodesWinOverLastWrittenForPresentDevices) {
  CdiSpecWriter w(cdi_dir_, state_dir_);
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 192)}), {}));
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 195)}), {"mlx5_0"}));
  absl::StatusOr<CdiSpecInput> parsed = ParseSpec(*ReadFile(w.SpecPath("example.com/rdma")));
  ASSERT_OK(parsed);
  ASSERT_EQ(parsed->devices.size(), 1u);
  EXPECT_EQ(parsed->devices[0].nodes[0].minor, 195u);
}

TEST_F(CdiSpecWriterTest, EmptyResultRemovesFiles) {
  CdiSpecWriter w(cdi_dir_, state_dir_);
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 192)}), {}));
  ASSERT_OK(w.Update(Input({}), {}));
  EXPECT_FALSE(PathExists(w.SpecPath("example.com/rdma")));
  EXPECT_FALSE(PathExists(w.StatePath("example.com/rdma")));
}

TEST_F(CdiSpecWriterTest, RemoveKindRemovesSpecAndState) {
  CdiSpecWriter w(cdi_dir_, state_dir_);
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 192)}), {}));
  ASSERT_TRUE(PathExists(w.StatePath("example.com/rdma")));
  ASSERT_OK(w.RemoveKind("example.com/rdma"));
  EXPECT_FALSE(PathExists(w.SpecPath("example.com/rdma")));
  EXPECT_FALSE(PathExists(w.StatePath("example.com/rdma")));
  EXPECT_OK(w.RemoveKind("example.com/rdma"));  // idempotent
}

TEST_F(CdiSpecWriterTest, UnchangedContentIsNotRewritten) {
  CdiSpecWriter w(cdi_dir_, state_dir_);
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 192)}), {}));
  struct stat before, after;
  ASSERT_EQ(::stat(w.SpecPath("example.com/rdma").c_str(), &before), 0);
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 192)}), {}));
  ASSERT_EQ(::stat(w.SpecPath("example.com/rdma").c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);  // a rename would have replaced the inode
  ASSERT_OK(w.Update(Input({Device("mlx5_0", 193)}), {}));
  ASSERT_EQ(::stat(w.SpecPath("example.com/rdma").c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino);
}

TEST_F(CdiSpecWriterTest, InvalidInputWritesNothing) {
  CdiSpecWriter w(cdi_dir_, state_dir_);
  CdiSpecInput in = Input({Device("bad name", 192)});
  absl::Status s = w.Update(in, {});
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("bad name"));
  EXPECT_FALSE(PathExists(w.SpecPath("example.com/rdma")));
  in.kind = "bad kind";
  EXPECT_THAT(w.Update(in, {}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(CdiSpecWriterTest, WrittenKindsSurviveARestartAndForgetRemovedOnes) {
  {
    CdiSpecWriter w(cdi_dir_, state_dir_);
    EXPECT_TRUE(w.WrittenKinds().empty());
    ASSERT_OK(w.Update(Input({Device("mlx5_0", 192)}), {}));
    CdiSpecInput other = Input({Device("efa0", 193)});
    other.kind = "vpc.amazonaws.com/efa";
    ASSERT_OK(w.Update(other, {}));
  }
  CdiSpecWriter w(cdi_dir_, state_dir_);  // a restarted agent
  std::vector<std::string> kinds = w.WrittenKinds();
  std::sort(kinds.begin(), kinds.end());
  EXPECT_THAT(kinds, ElementsAre("example.com/rdma", "vpc.amazonaws.com/efa"));
  ASSERT_OK(w.RemoveKind("example.com/rdma"));
  EXPECT_THAT(w.WrittenKinds(), ElementsAre("vpc.amazonaws.com/efa"));
}

}  // namespace
}  // namespace fabric::cdi
