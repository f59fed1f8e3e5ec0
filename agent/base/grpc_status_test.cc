#include "agent/base/grpc_status.h"

#include "gtest/gtest.h"

namespace fabric {
namespace {

TEST(GrpcStatusTest, EveryCanonicalCodeRoundTripsWithItsMessage) {
  for (int c = 1; c <= 16; ++c) {
    absl::Status in(static_cast<absl::StatusCode>(c), "why");
    grpc::Status g = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(g.error_message(), "why");
    EXPECT_EQ(FromGrpcStatus(g), in);
  }
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK, "x").ok());
}

TEST(GrpcStatusTest, PrefixAndOutOfRangeCodes) {
  absl::Status s =
      FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connect failed"), "List");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "List: connect failed");
  EXPECT_EQ(ToGrpcStatus(absl::Status(static_cast<absl::StatusCode>(42), "x")).error_code(),
            grpc::StatusCode::UNKNOWN);
}

}  // namespace
}  // namespace fabric
