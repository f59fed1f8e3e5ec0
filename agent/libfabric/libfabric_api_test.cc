#include "agent/libfabric/libfabric_api.h"

#include <rdma/fi_errno.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/libfabric/fabric_error.h"
#include "agent/libfabric/fi_handles.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric::fi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Debian's libfabric, loaded at run time: every bound entry point works, and
// the tcp provider (always built in) answers.
TEST(LibfabricApiTest, LoadsLibfabricAndOpensTcp) {
  ASSERT_TRUE(Load().ok()) << Load();
  InfoPtr hints(AllocInfo());
  ASSERT_NE(hints, nullptr);
  hints->ep_attr->type = FI_EP_RDM;
  hints->fabric_attr->prov_name = strdup("tcp");
  fi_info* raw = nullptr;
  ASSERT_EQ(GetInfo(kFabricApiVersion, nullptr, nullptr, 0, hints.get(), &raw), 0);
  InfoPtr list(raw);
  ASSERT_NE(list, nullptr);
  EXPECT_THAT(list->fabric_attr->prov_name, HasSubstr("tcp"));
  InfoPtr copy(DupInfo(list.get()));
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->next, nullptr);  // fi_dupinfo copies one entry
  fid_fabric* fabric = nullptr;
  ASSERT_EQ(Fabric(copy->fabric_attr, &fabric, nullptr), 0);
  FidPtr<fid_fabric> owned(fabric);
  absl::Status no_data = FabricError(-FI_ENODATA, "fi_getinfo");
  EXPECT_EQ(no_data.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(no_data.message()), Not(HasSubstr("not loaded")));
}

// Run only as the child of the next test, with LD_LIBRARY_PATH pointing at a
// libfabric.so.1 that exports nothing: what a caller sees then.
TEST(LibfabricApiTest, ChildReportsWhatLoadSaw) {
  if (std::getenv("LIBFABRIC_API_TEST_CHILD") == nullptr) GTEST_SKIP() << "child only";
  fi_info* raw = nullptr;
  std::printf("LOAD=%s\nGETINFO=%d\nALLOC=%s\n", Load().ToString().c_str(),
              GetInfo(kFabricApiVersion, nullptr, nullptr, 0, nullptr, &raw),
              AllocInfo() == nullptr ? "null" : "non-null");
}

TEST(LibfabricApiTest, LibraryWithoutTheSymbolsIsANamedErrorNotACrash) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  std::string cmd =
      absl::StrCat("env LIBFABRIC_API_TEST_CHILD=1 LD_LIBRARY_PATH=", EMPTY_LIBFABRIC_DIR, " ",
                   self, " --gtest_filter=LibfabricApiTest.ChildReportsWhatLoadSaw");
  FILE* child = popen(cmd.c_str(), "r");
  ASSERT_NE(child, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), child) != nullptr) out += buf;
  EXPECT_EQ(pclose(child), 0) << out;
  EXPECT_THAT(out, HasSubstr("libfabric.so.1: no symbol fi_getinfo@FABRIC_1.3")) << out;
  EXPECT_THAT(out, HasSubstr(absl::StrCat("GETINFO=", -FI_ENOSYS))) << out;
  EXPECT_THAT(out, HasSubstr("ALLOC=null")) << out;
}

}  // namespace
}  // namespace fabric::fi
