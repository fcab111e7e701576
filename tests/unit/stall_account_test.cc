#include "cache/account/stall_account.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace gpufs {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr size_t kGroups = 4;

// An account over `files` files with a clock the test moves and fetched totals it sets.
struct Fixture {
  explicit Fixture(size_t files)
      : account(
            files, kGroups, [this] { return fetched; }, [this] { return now; }) {}
  uint64_t now = 1000 * kMs;
  std::array<uint64_t, kServedFromCount> fetched{};
  StallAccount account;
};

size_t At(ServedFrom from) { return static_cast<size_t>(from); }

TEST(StallAccount, TheStallIsTheUnionOfOverlappingWaitsNotTheirSum) {
  Fixture f(100);
  StallWait a(f.account), b(f.account);
  a.Begin();  // t = 0
  f.now += 100 * kMs;
  b.Begin();  // t = 100
  f.now += 50 * kMs;
  a.Served(ServedFrom::kSourceGroup, 10, 0);  // t = 150: a waited 150
  f.now += 100 * kMs;
  b.Served(ServedFrom::kDiskTier, 20, 0);  // t = 250: b waited 150
  f.now += 750 * kMs;                      // t = 1000: nothing waits
  StallWait c(f.account);
  c.Served(ServedFrom::kSourceGroup, 30, 0);  // never waited: memory's
  const StallEpoch e = f.account.Current();
  EXPECT_EQ(e.delta.at_ns, 1000 * kMs);
  EXPECT_EQ(e.delta.stalled_ns, 250 * kMs);  // not 300: the waits overlapped by 50
  EXPECT_DOUBLE_EQ(e.StallFraction(), 0.25);
  EXPECT_EQ(e.delta.wait_ns[At(ServedFrom::kSourceGroup)], 150 * kMs);
  EXPECT_EQ(e.delta.wait_ns[At(ServedFrom::kDiskTier)], 150 * kMs);
  EXPECT_EQ(e.delta.reads[At(ServedFrom::kMemory)], 1u);
  EXPECT_EQ(e.delta.bytes[At(ServedFrom::kMemory)], 30u);
  EXPECT_EQ(e.delta.reads[At(ServedFrom::kSourceGroup)], 1u);
  EXPECT_EQ(e.delta.reads[At(ServedFrom::kDiskTier)], 1u);
  // 60 bytes over the 750 ms nobody waited.
  EXPECT_NEAR(e.DemandMbPerS(), 60 / 1e6 / 0.75, 1e-12);
}

TEST(StallAccount, AWaitStillOpenCountsUpToNowAndAFailedReadEndsItsWait) {
  Fixture f(10);
  {
    StallWait failed(f.account);
    failed.Begin();
    f.now += 40 * kMs;
    EXPECT_EQ(f.account.Current().delta.stalled_ns, 40 * kMs);
  }  // the read failed: its wait ends, nothing is served
  f.now += 60 * kMs;
  const StallEpoch e = f.account.Current();
  EXPECT_EQ(e.delta.stalled_ns, 40 * kMs);
  EXPECT_EQ(e.delta.bytes_served(), 0u);
}

TEST(StallAccount, TheClockStartsAtTheFirstReadNotAtTheMount) {
  Fixture f(10);
  f.now += 3600'000 * kMs;  // the mount idles for an hour
  EXPECT_EQ(f.account.Current().delta.at_ns, 0u);
  StallWait w(f.account);
  w.Begin();
  f.now += 10 * kMs;
  w.Served(ServedFrom::kSourceMember, 5, 0);
  EXPECT_EQ(f.account.Current().delta.at_ns, 10 * kMs);
  EXPECT_DOUBLE_EQ(f.account.Current().StallFraction(), 1.0);
}

TEST(StallAccount, AWholePassEndsWithItsLastFileAndThePauseAfterItIsNoEpochsTime) {
  Fixture f(10);
  StallWait first(f.account);
  first.Begin();
  f.now += 100 * kMs;
  first.Served(ServedFrom::kSourceGroup, 1, 0);
  for (uint32_t file = 0; file < 9; ++file) {
    EXPECT_EQ(f.account.FileDone(file), StallAccount::kSame);
    if (file == 2) {
      EXPECT_EQ(f.account.FileDone(0), StallAccount::kSame);  // before half
    }
  }
  f.fetched[At(ServedFrom::kSourceGroup)] = 1000;
  f.now += 400 * kMs;
  EXPECT_EQ(f.account.FileDone(9), StallAccount::kEndedWith);
  ASSERT_TRUE(f.account.Last().has_value());
  const StallEpoch one = *f.account.Last();
  EXPECT_EQ(one.epoch, 1u);
  EXPECT_EQ(one.delta.at_ns, 500 * kMs);
  EXPECT_EQ(one.delta.stalled_ns, 100 * kMs);
  EXPECT_EQ(one.distinct_files, 10u);
  EXPECT_EQ(one.not_requested, 0u);
  EXPECT_EQ(one.delta.files, 11u);  // file 0 twice
  EXPECT_EQ(one.delta.fetched[At(ServedFrom::kSourceGroup)], 1000u);
  // A validation pass or a checkpoint: an hour with no read is no epoch's.
  f.now += 3600'000 * kMs;
  EXPECT_EQ(f.account.epoch(), 2u);
  EXPECT_EQ(f.account.Current().delta.at_ns, 0u);
  EXPECT_EQ(f.account.FileDone(3), StallAccount::kSame);  // a hit begins epoch 2
  f.now += 50 * kMs;
  EXPECT_EQ(f.account.Current().delta.at_ns, 50 * kMs);
  EXPECT_EQ(f.account.Current().distinct_files, 1u);
}

// The cache counts a read where it came from, then its file as done: the read that ends a
// pass is that epoch's, and a hit that begins the next (before any wait) is the next's.
TEST(StallAccount, EveryReadOfAPassIsItsEpochsFromTheFirstHitToTheLastFile) {
  Fixture f(4);
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t file = 0; file < 4; ++file) {
      f.now += kMs;
      f.account.Served(ServedFrom::kMemory, 10, 0, 0);
      f.account.FileDone(file);
    }
    ASSERT_TRUE(f.account.Last().has_value());
    const StallEpoch e = *f.account.Last();
    EXPECT_EQ(e.epoch, static_cast<uint32_t>(pass + 1));
    EXPECT_EQ(e.delta.reads[At(ServedFrom::kMemory)], 4u) << "pass " << pass;
    EXPECT_EQ(e.delta.bytes_served(), 40u) << "pass " << pass;
    EXPECT_EQ(e.delta.at_ns, 3 * kMs) << "pass " << pass;  // from its first read to its last
    f.now += 100 * kMs;                                    // a pause between epochs
  }
}

TEST(StallAccount, AFileReadAgainAfterHalfAPassBeginsTheNextAndNamesWhatWasNeverAsked) {
  Fixture f(10);
  for (uint32_t file : {0u, 1u, 2u, 3u, 4u}) {
    EXPECT_EQ(f.account.FileDone(file), StallAccount::kSame);
  }
  f.fetched[At(ServedFrom::kSourceGroup)] = 500;
  // Files 5..9 came from the page cache: the daemon never saw them.
  EXPECT_EQ(f.account.FileDone(2), StallAccount::kBegan);
  const StallEpoch one = *f.account.Last();
  EXPECT_EQ(one.distinct_files, 5u);
  EXPECT_EQ(one.not_requested, 5u);
  EXPECT_EQ(one.delta.files, 5u);  // not the 2 that began the next
  EXPECT_EQ(one.delta.fetched[At(ServedFrom::kSourceGroup)], 500u);
  EXPECT_EQ(f.account.epoch(), 2u);
  EXPECT_EQ(f.account.Current().distinct_files, 1u);
  EXPECT_EQ(f.account.Current().delta.files, 1u);
}

TEST(StallAccount, TheHitRatioIsTheShareOfBytesServedThatTheSourceDidNotSend) {
  Fixture f(4);
  StallWait w(f.account);
  w.Begin();
  w.Served(ServedFrom::kSourceMember, 100, 0);       // a miss: it went to the source
  f.account.Served(ServedFrom::kMemory, 300, 0, 1);  // a group held before: a hit
  StallWait t(f.account);
  t.Begin();
  t.Served(ServedFrom::kDiskTier, 100, 2);  // the tier's bytes are hits
  f.fetched[At(ServedFrom::kSourceMember)] = 100;
  EXPECT_DOUBLE_EQ(*f.account.Current().HitRatio(), 0.8);
  const nlohmann::json stats = f.account.Stats();
  EXPECT_EQ(stats[stall_stat::kCurrent][stall_stat::kFrom]["memory"][stall_stat::kBytes], 300);
  EXPECT_EQ(stats[stall_stat::kCurrent][stall_stat::kHitBytes], 400);
  EXPECT_EQ(stats[stall_stat::kCurrent][stall_stat::kMissBytes], 100);
  EXPECT_TRUE(stats[stall_stat::kLast].is_null());
}

TEST(StallAccount, NothingServedHasNoHitRatioNotAZero) {
  Fixture f(4);
  EXPECT_FALSE(f.account.Current().HitRatio().has_value());
  const nlohmann::json stats = f.account.Stats();
  EXPECT_TRUE(stats[stall_stat::kCurrent][stall_stat::kHitRatio].is_null());
  EXPECT_TRUE(stats[stall_stat::kTotals][stall_stat::kHitRatio].is_null());
}

// A cold first epoch: whole groups loaded and prefetched far ahead of the reads, so the
// source sent 46 times what was served after a few files. Every byte served came from the
// source: 0, not 1 - 46. The next epoch reads what the first left in memory: 1.
TEST(StallAccount, AColdEpochWhoseLoadsRunAheadOfItsReadsHitsNothingAndNeverLess) {
  Fixture f(8);
  StallWait first(f.account);
  first.Begin();
  f.account.Fetching(0);
  f.now += 10 * kMs;
  first.Served(ServedFrom::kSourceGroup, 10, 0);
  for (uint32_t g = 1; g < kGroups; ++g) f.account.Fetching(g);  // prefetched
  f.fetched[At(ServedFrom::kSourceGroup)] = 46 * 40;
  for (uint32_t file = 0; file < 3; ++file) {
    f.account.Served(ServedFrom::kMemory, 10, 0, file / 2);
    f.account.FileDone(file);
  }
  EXPECT_DOUBLE_EQ(*f.account.Current().HitRatio(), 0.0);
  for (uint32_t file = 3; file < 8; ++file) {
    f.account.Served(ServedFrom::kMemory, 10, 0, file / 2);
    f.account.FileDone(file);
  }
  ASSERT_TRUE(f.account.Last().has_value());
  EXPECT_DOUBLE_EQ(*f.account.Last()->HitRatio(), 0.0);
  // Epoch 2: groups 0-2 were kept; group 3 was fetched again between the epochs.
  f.account.Fetching(3);
  for (uint32_t file = 0; file < 8; ++file) f.account.Served(ServedFrom::kMemory, 10, 0, file / 2);
  EXPECT_DOUBLE_EQ(*f.account.Current().HitRatio(), 0.75);
}

// Hits and misses are counted apart: a ratio read while reads go on stays in [0, 1].
TEST(StallAccount, TheHitRatioStaysWithinZeroAndOneWhileReadsGoOn) {
  StallAccount account(1000, kGroups, nullptr);
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  for (uint32_t r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      for (uint64_t i = 0; !stop.load(); ++i) {
        if (i % 7 == 0) account.Fetching(static_cast<uint32_t>(i % kGroups));
        account.Served(r % 2 ? ServedFrom::kMemory : ServedFrom::kSourceGroup, 4096, r % 2 ? 0 : 1,
                       static_cast<uint32_t>(i % kGroups));
      }
    });
  }
  for (int i = 0; i < 2000; ++i) {
    const std::optional<double> ratio = account.Current().HitRatio();
    if (!ratio) continue;
    ASSERT_GE(*ratio, 0.0);
    ASSERT_LE(*ratio, 1.0);
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
}

}  // namespace
}  // namespace gpufs
