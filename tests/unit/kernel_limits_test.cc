#include "cli/options/kernel_limits.h"

#include <gtest/gtest.h>

namespace gpufs {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

MountArgs WithBudget(uint64_t cache_bytes, const char* streaming = "auto") {
  MountArgs args;
  args.cache_bytes = cache_bytes;
  args.streaming = streaming;
  return args;
}

TEST(KernelLimits, ThreadsFollowTheCoresAndBackgroundFollowsThreads) {
  MountArgs small = WithBudget(kGiB);
  ChooseKernelLimits(small, kGiB, 2, 24 * kGiB);
  EXPECT_EQ(small.max_threads, 16u);
  EXPECT_EQ(small.cache.max_background, 16u);
  EXPECT_EQ(small.cache.congestion_threshold, 12u);
  MountArgs big = WithBudget(kGiB);
  ChooseKernelLimits(big, kGiB, 16, 128 * kGiB);
  EXPECT_EQ(big.max_threads, 64u);
  EXPECT_EQ(big.cache.max_background, 64u);
  MountArgs asked = WithBudget(kGiB);
  asked.max_threads = 8;
  asked.max_background = 100;
  ChooseKernelLimits(asked, kGiB, 16, 128 * kGiB);
  EXPECT_EQ(asked.max_threads, 8u);
  EXPECT_EQ(asked.cache.max_background, 100u);
  EXPECT_EQ(asked.cache.congestion_threshold, 75u);
}

TEST(KernelLimits, StreamsOnlyWhatNeitherTheBudgetNorThePageCacheCouldKeep) {
  auto streams = [](uint64_t dataset, uint64_t budget, const char* mode = "auto") {
    MountArgs args = WithBudget(budget, mode);
    ChooseKernelLimits(args, dataset, 2, 24 * kGiB);
    return args.cache.direct_io;
  };
  EXPECT_FALSE(streams(4 * kGiB, 6 * kGiB));   // fits the budget
  EXPECT_FALSE(streams(12 * kGiB, 6 * kGiB));  // fits the page cache beside it
  EXPECT_TRUE(streams(19 * kGiB, 6 * kGiB));   // fits neither
  EXPECT_TRUE(streams(1300 * kGiB, 6 * kGiB));
  EXPECT_FALSE(streams(1300 * kGiB, 0));  // no group cache: the page cache is the cache
  EXPECT_TRUE(streams(kGiB, 6 * kGiB, "on"));
  EXPECT_FALSE(streams(1300 * kGiB, 6 * kGiB, "off"));
}

}  // namespace
}  // namespace gpufs
