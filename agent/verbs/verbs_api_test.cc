#include "agent/verbs/verbs_api.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/verbs/verbs_handles.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::verbs {
namespace {

using ::testing::HasSubstr;

// Debian's libibverbs, loaded at run time: every entry point binds, and the
// list call answers (no RDMA device here: an empty list, or ENOSYS without
// any RDMA sysfs class, as ibv_devices reports).
TEST(VerbsApiTest, LoadsLibibverbsAndLists) {
  ASSERT_TRUE(Load().ok()) << Load();
  int n = -1;
  errno = 0;
  DeviceListPtr list(GetDeviceList(&n));
  if (list) {
    EXPECT_GE(n, 0);
    for (int i = 0; i < n; ++i) EXPECT_STRNE(GetDeviceName(list.get()[i]), "");
  } else {
    EXPECT_EQ(errno, ENOSYS);
  }
  EXPECT_STREQ(WcStatusStr(IBV_WC_SUCCESS), "success");
  EXPECT_TRUE(LoadEfa().ok()) << LoadEfa();
}

TEST(VerbsApiTest, ErrorConventions) {
  EXPECT_TRUE(VerbsError(0, "ibv_modify_qp").ok());
  absl::Status positive = VerbsError(EINVAL, "ibv_modify_qp");
  EXPECT_EQ(positive.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(positive.message()), HasSubstr("ibv_modify_qp"));
  errno = ENOMEM;
  EXPECT_EQ(VerbsErrno(-1), ENOMEM);
  EXPECT_EQ(VerbsError(-1, "ibv_reg_mr").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(VerbsErrno(-EINVAL), EINVAL);  // some providers return -errno
}

// Run only as the child of the next test, with LD_LIBRARY_PATH pointing at a
// libibverbs.so.1 that exports nothing.
TEST(VerbsApiTest, ChildReportsWhatLoadSaw) {
  if (std::getenv("VERBS_API_TEST_CHILD") == nullptr) GTEST_SKIP() << "child only";
  int n = 0;
  errno = 0;
  ibv_device** list = GetDeviceList(&n);
  std::printf("LOAD=%s\nLIST=%s\nERRNO=%d\n", Load().ToString().c_str(),
              list == nullptr ? "null" : "non-null", errno);
}

TEST(VerbsApiTest, LibraryWithoutTheSymbolsIsANamedErrorNotACrash) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  std::string cmd =
      absl::StrCat("env VERBS_API_TEST_CHILD=1 LD_LIBRARY_PATH=", EMPTY_LIBIBVERBS_DIR, " ", self,
                   " --gtest_filter=VerbsApiTest.ChildReportsWhatLoadSaw");
  FILE* child = popen(cmd.c_str(), "r");
  ASSERT_NE(child, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), child) != nullptr) out += buf;
  EXPECT_EQ(pclose(child), 0) << out;
  EXPECT_THAT(out, HasSubstr("libibverbs.so.1: no symbol ibv_get_device_list@IBVERBS_1.1")) << out;
  EXPECT_THAT(out, HasSubstr("LIST=null")) << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("ERRNO=", ENOSYS))) << out;
}

}  // namespace
}  // namespace fabric::verbs
