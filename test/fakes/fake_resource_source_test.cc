#include "test/fakes/fake_resource_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fabric::restrack {
namespace {

TEST(FakeResourceSourceTest, ReturnsWhatWasSetAndCountsCalls) {
  FakeResourceSource fake(
      {Qp("rxe0", 17, 164), KernelOwned(ResourceKind::kCq, "rxe0", 0, "ib_core")});
  auto got = fake.Dump();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].kind, ResourceKind::kQp);
  EXPECT_EQ((*got)[0].port, 1u);
  EXPECT_EQ((*got)[1].kern_name, "ib_core");
  EXPECT_EQ((*got)[1].pid, 0u);

  fake.SetError(absl::UnavailableError("no RDMA netlink"));
  EXPECT_EQ(fake.Dump().status().code(), absl::StatusCode::kUnavailable);
  fake.SetError(absl::OkStatus());  // a test bug, not a success
  EXPECT_EQ(fake.Dump().status().code(), absl::StatusCode::kInternal);

  fake.Set({Mr("mlx5_0", 3, 9, 4096), Pd("mlx5_0", 1, 9), Cq("mlx5_0", 2, 9)});
  got = fake.Dump();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)[0].mr_bytes, 4096u);
  EXPECT_EQ(fake.dump_calls(), 4);

  DumpNotes notes;
  notes.vanished_devices = 2;
  fake.SetNotes(notes);
  EXPECT_EQ(fake.LastDumpNotes().vanished_devices, 2u);
}

}  // namespace
}  // namespace fabric::restrack
