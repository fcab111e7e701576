// The deadline of one transfer: a fixed part, then the size at the floor rate.
#include "source/remote/transfer/deadline.h"

#include <gtest/gtest.h>

namespace gpufs::remote {
namespace {

using namespace std::chrono_literals;

TEST(TransferDeadline, IsConnectAndAllowanceForNoBody) {
  const TransferDeadlines d{3s, 10s, 10s, 1 << 20};
  EXPECT_EQ(TotalDeadline(d, 0), 13s);
}

TEST(TransferDeadline, GrowsWithTheSizeAtTheFloorRate) {
  const TransferDeadlines d{3s, 10s, 10s, 1 << 20};
  EXPECT_EQ(TotalDeadline(d, 4 << 20), 17s);
  EXPECT_EQ(TotalDeadline(d, 8 << 20), 21s);
  // A part of a second is rounded up: a deadline is never shorter than the size needs.
  EXPECT_EQ(TotalDeadline(d, (1 << 20) + 1), 14001ms);
  EXPECT_EQ(TotalDeadline(TransferDeadlines{0s, 10s, 0s, 3}, 1), 334ms);
}

TEST(TransferDeadline, ATrickleMissesTheDeadlineOfABlock) {
  // 2 bytes a second never trips the idle check, but a 16 KiB block at that rate would
  // take over two hours: the total deadline ends it within seconds.
  const TransferDeadlines d{1s, 10s, 2s, 64 << 10};
  EXPECT_EQ(TotalDeadline(d, 16 << 10), 3250ms);
  EXPECT_LT(TotalDeadline(d, 16 << 10), std::chrono::seconds((16 << 10) / 2));
}

TEST(TransferDeadline, NeverOverflowsNorIsZeroRateUnbounded) {
  const TransferDeadlines slow{3s, 10s, 10s, 1};
  const auto huge = TotalDeadline(slow, UINT64_MAX);
  EXPECT_GT(huge, 13s);
  EXPECT_GT(huge.count(), 0);
  const TransferDeadlines zero{3s, 10s, 10s, 0};  // refused by the options; 1 B/s here
  EXPECT_EQ(TotalDeadline(zero, 5), 18s);
}

TEST(TransferDeadline, DefaultsAreTheDocumentedOnes) {
  const TransferDeadlines d;
  EXPECT_EQ(d.connect, 3s);
  EXPECT_EQ(d.idle, 10s);
  EXPECT_EQ(d.allowance, 10s);
  EXPECT_EQ(d.floor_rate, 1u << 20);
}

}  // namespace
}  // namespace gpufs::remote
