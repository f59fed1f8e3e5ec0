#include "agent/podresources/token_bucket.h"

#include <gtest/gtest.h>

namespace fabric::podresources {
namespace {

using Clock = TokenBucket::Clock;

TEST(TokenBucketTest, BurstThenRefillAtRate) {
  Clock::time_point now{};
  TokenBucket bucket(100, 10, [&] { return now; });
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(bucket.TryAcquire()) << i;
  EXPECT_FALSE(bucket.TryAcquire());
  now += std::chrono::milliseconds(9);
  EXPECT_FALSE(bucket.TryAcquire());  // 0.9 tokens
  now += std::chrono::milliseconds(1);
  EXPECT_TRUE(bucket.TryAcquire());
  EXPECT_FALSE(bucket.TryAcquire());
  now += std::chrono::seconds(10);  // refill caps at burst
  int taken = 0;
  while (bucket.TryAcquire()) ++taken;
  EXPECT_EQ(taken, 10);
}

TEST(TokenBucketTest, AcquireGivesUpWhenWaitTooLong) {
  Clock::time_point now{};
  TokenBucket bucket(1, 1, [&] { return now; });
  EXPECT_TRUE(bucket.Acquire(std::chrono::milliseconds(0)));
  EXPECT_FALSE(bucket.Acquire(std::chrono::milliseconds(500)));  // needs 1 s
}

TEST(TokenBucketTest, AcquireWaitsForToken) {
  TokenBucket bucket(50, 1);
  EXPECT_TRUE(bucket.Acquire(std::chrono::milliseconds(0)));
  auto start = Clock::now();
  EXPECT_TRUE(bucket.Acquire(std::chrono::milliseconds(500)));
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(15));
}

}  // namespace
}  // namespace fabric::podresources
