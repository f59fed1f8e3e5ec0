// gMock matchers for absl::Status / StatusOr (abseil 20220623 ships none).
#ifndef FABRIC_TEST_TESTING_STATUS_MATCHERS_H_
#define FABRIC_TEST_TESTING_STATUS_MATCHERS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabric {
namespace testing_internal {
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace testing_internal

MATCHER(IsOk, "is OK") {
  const absl::Status& s = testing_internal::GetStatus(arg);
  if (!s.ok()) *result_listener << "status: " << s;
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + ::testing::PrintToString(code)) {
  const absl::Status& s = testing_internal::GetStatus(arg);
  *result_listener << "status: " << s;
  return s.code() == code;
}

MATCHER_P(IsOkAndHolds, m, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status: " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(m, *arg, result_listener);
}

}  // namespace fabric

#define EXPECT_OK(expr) EXPECT_THAT((expr), ::fabric::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::fabric::IsOk())

#endif  // FABRIC_TEST_TESTING_STATUS_MATCHERS_H_
