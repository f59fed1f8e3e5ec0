// Directories tests work in: the checked-in test data, and temporary
// directories removed with everything in them.
#ifndef FABRIC_TEST_TESTING_TEST_DIRS_H_
#define FABRIC_TEST_TESTING_TEST_DIRS_H_

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace fabric::testing {

// test/testdata: FABRIC_TESTDATA (ctest sets it), else relative to the cwd.
inline std::string TestDataDir() {
  const char* td = std::getenv("FABRIC_TESTDATA");
  return td ? td : "test/testdata";
}

// A fresh directory /tmp/<prefix>-XXXXXX, short because unix socket paths are
// limited to 108 bytes. Removed at destruction unless the environment
// variable `keep_env` (if given) is set, for looking at a failed run.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "fab", const char* keep_env = nullptr)
      : keep_env_(keep_env) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~TempDir() {
    if (keep_env_ != nullptr && std::getenv(keep_env_) != nullptr) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const char* keep_env_;
};

}  // namespace fabric::testing

#endif  // FABRIC_TEST_TESTING_TEST_DIRS_H_
