// The retry schedule: capped exponential backoff with full jitter, within a deadline.
#include "source/remote/transfer/backoff.h"

#include <gtest/gtest.h>

#include <set>

namespace gpufs::remote {
namespace {

using namespace std::chrono_literals;

TEST(Backoff, DrawsBelowTheExponentialBoundThenTheCap) {
  std::mt19937_64 random(1);
  const BackoffPolicy policy;  // 100 ms, 2 s
  for (unsigned retry = 0; retry < 64; ++retry) {
    const auto bound = std::min<std::chrono::milliseconds>(
        policy.cap, policy.base * (1ll << std::min(retry, 20u)));
    for (int i = 0; i < 200; ++i) {
      const auto delay = BackoffDelay(retry, random, policy);
      EXPECT_GE(delay, 0ms);
      EXPECT_LE(delay, bound) << "retry " << retry;
    }
  }
}

TEST(Backoff, IsJitteredNotTheSameForEveryClient) {
  std::mt19937_64 random(2);
  std::set<int64_t> seen;
  for (int i = 0; i < 50; ++i) seen.insert(BackoffDelay(6, random).count());
  EXPECT_GT(seen.size(), 20u);
}

TEST(RetryDelay, RetriesUntilTheDeadlineNotForACountOfAttempts) {
  // A 20 s deadline: however many retries came before, one more is due while time is left.
  std::mt19937_64 random(3);
  std::chrono::milliseconds elapsed{0};
  unsigned retries = 0;
  while (auto delay = RetryDelay(retries, elapsed, 20s, random)) {
    elapsed += *delay + 5ms;  // each attempt is refused at once
    ++retries;
  }
  EXPECT_GE(elapsed, 20s);
  EXPECT_LT(elapsed, 20s + 5ms + 1ms);
  // About one retry a second once at the cap, well past the 5 attempts of old.
  EXPECT_GT(retries, 10u);
  EXPECT_LT(retries, 200u);
}

TEST(RetryDelay, TheLastRetryStartsAtTheDeadlineNotPastIt) {
  std::mt19937_64 random(4);
  for (int i = 0; i < 200; ++i) {
    const auto delay = RetryDelay(30, 19'900ms, 20s, random);
    ASSERT_TRUE(delay);
    EXPECT_LE(*delay, 100ms);
  }
  EXPECT_FALSE(RetryDelay(0, 20s, 20s, random));
  EXPECT_FALSE(RetryDelay(0, 25s, 20s, random));
  // A deadline of 0 (--retry-seconds 0): one attempt, no retry.
  EXPECT_FALSE(RetryDelay(0, 0ms, 0ms, random));
}

TEST(RetryDelay, AnOutageShorterThanTheDeadlineIsWaitedOut) {
  // The store is back after 3 s: some retry starts between 3 s and 3 s plus the cap.
  std::mt19937_64 random(5);
  for (int run = 0; run < 100; ++run) {
    std::chrono::milliseconds elapsed{0};
    unsigned retry = 0;
    while (elapsed < 3s) {
      auto delay = RetryDelay(retry++, elapsed, 20s, random);
      ASSERT_TRUE(delay);
      elapsed += *delay;
    }
    EXPECT_LE(elapsed, 3s + BackoffPolicy{}.cap);
  }
}

}  // namespace
}  // namespace gpufs::remote
