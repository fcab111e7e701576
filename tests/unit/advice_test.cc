#include "cache/account/advice.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace gpufs {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint32_t kGroups = 16, kPerGroup = 8;
constexpr uint64_t kFileBytes = 1000;
constexpr uint64_t kGroupBytes = kPerGroup * kFileBytes;
constexpr size_t kSourceMember = static_cast<size_t>(ServedFrom::kSourceMember);
constexpr size_t kSourceGroup = static_cast<size_t>(ServedFrom::kSourceGroup);

WhatIfShape Shape() {
  WhatIfShape s;
  for (uint32_t f = 0; f < kGroups * kPerGroup; ++f) {
    s.file_group.push_back(f / kPerGroup);
    s.file_bytes.push_back(kFileBytes);
  }
  s.group_bytes.assign(kGroups, kGroupBytes);
  return s;
}

std::vector<uint32_t> Shuffled(unsigned seed) {
  std::vector<uint32_t> order(kGroups * kPerGroup);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::minstd_rand(seed));
  return order;
}

// An epoch 2 of 10 s at a budget of 4 groups of 16: members read alone waited
// `member_wait` in all (4 readers); the union of the waits was `stalled`.
AdviceInput Input(uint64_t stalled, uint64_t member_wait) {
  AdviceInput in;
  in.epoch.epoch = 2;
  in.epoch.peak_waiting = 4;
  in.epoch.delta.at_ns = 10'000 * kMs;
  in.epoch.delta.stalled_ns = stalled;
  in.epoch.delta.wait_ns[kSourceMember] = member_wait;
  in.ended = true;
  in.accesses = Shuffled(1);
  in.policy = "consume-once";
  in.cache_bytes = 4 * kGroupBytes;
  in.dataset_bytes = kGroups * kGroupBytes;
  in.memory_available = 1 << 30;
  // What the model says the budget fetches is what the epoch measured.
  const WhatIfPoint today =
      Replay(Shape(), Shuffled(2), in.accesses, 1.0, in.policy, in.cache_bytes, 0);
  in.epoch.delta.fetched[kSourceMember] = today.member_bytes_from_source;
  in.epoch.delta.fetched[kSourceGroup] = today.bytes_from_source - today.member_bytes_from_source;
  return in;
}

TEST(Advice, TodaysBudgetPredictsWhatWasMeasured) {
  const AdviceInput in = Input(6'000 * kMs, 20'000 * kMs);
  const WhatIfPoint today =
      Replay(Shape(), Shuffled(2), in.accesses, 1.0, in.policy, in.cache_bytes, 0);
  const Prediction p = Predict(in.epoch, today);
  EXPECT_NEAR(p.epoch_s, 10.0, 1e-9);
  EXPECT_NEAR(p.stall_s, 6.0, 1e-9);
  EXPECT_FALSE(p.bound);
}

TEST(Advice, TheWholeDatasetInMemoryLeavesTheLoadersOwnTime) {
  const AdviceInput in = Input(6'000 * kMs, 20'000 * kMs);
  const WhatIfPoint all =
      Replay(Shape(), Shuffled(2), in.accesses, 1.0, in.policy, in.dataset_bytes, 0);
  EXPECT_EQ(all.bytes_from_source, 0u);
  const Prediction p = Predict(in.epoch, all);
  EXPECT_NEAR(p.epoch_s, 10.0 - 20.0 / 4, 1e-9);  // waits of 20 s over 4 readers gone
  EXPECT_DOUBLE_EQ(p.stall_s, 0.0);
  // The advice names that time, for the plot's no-stall line.
  const nlohmann::json a = Advise(Shape(), in);
  EXPECT_NEAR(a[advice_stat::kLoaderS].get<double>(), 10.0 - 20.0 / 4, 1e-9);
}

// An epoch of 10 s whose `readers` readers waited `waits_s` on 1000 bytes of members.
StallEpoch MemberEpoch(uint64_t stalled_ms, uint64_t waits_ms, uint32_t readers) {
  StallEpoch e;
  e.peak_waiting = readers;
  e.delta.at_ns = 10'000 * kMs;
  e.delta.stalled_ns = stalled_ms * kMs;
  e.delta.wait_ns[kSourceMember] = waits_ms * kMs;
  e.delta.fetched[kSourceMember] = 1000;
  return e;
}

WhatIfPoint MemberPoint(uint64_t bytes) {
  WhatIfPoint p;
  p.policy = "consume-once";
  p.bytes_from_source = p.member_bytes_from_source = bytes;
  return p;
}

// One reader's waits never overlap: its stall is their sum, priced by the byte.
TEST(Advice, OneReadersStallIsItsWaits) {
  const Prediction half = Predict(MemberEpoch(6'000, 6'000, 1), MemberPoint(500));
  EXPECT_NEAR(half.stall_s, 3.0, 1e-9);
  EXPECT_NEAR(half.epoch_s, 4.0 + 3.0, 1e-9);
}

// Eight readers waited nearly all the time, their waits overlapping 7-fold; a budget that
// leaves 1% of the misses leaves waits that rarely overlap: more stall than 1% of it,
// though never more than the waits' sum.
TEST(Advice, RareMissesOverlapLessThanManyDo) {
  const StallEpoch e = MemberEpoch(9'900, 72'000, 8);
  const Prediction rare = Predict(e, MemberPoint(10));  // 0.72 s of waits
  EXPECT_NEAR(rare.epoch_s, 1.0 + 0.72 / 8, 1e-9);
  EXPECT_GT(rare.stall_s, 3 * 0.01 * 9.9);
  EXPECT_LE(rare.stall_s, 0.72);
  const Prediction half = Predict(e, MemberPoint(500));
  EXPECT_GT(half.StallFraction(), 0.95);  // someone still waits nearly all the time
}

TEST(Advice, AStalledEpochGetsTheSmallestBudgetUnderTheTarget) {
  const nlohmann::json a = Advise(Shape(), Input(6'000 * kMs, 20'000 * kMs));
  ASSERT_EQ(a[advice_stat::kVerdict], advice_stat::kMemory) << a.dump(1);
  const uint64_t chosen = a[advice_stat::kAdvice][advice_stat::kCacheBytes];
  EXPECT_GT(chosen, 4 * kGroupBytes);
  EXPECT_LT(a[advice_stat::kAdvice][advice_stat::kStallFraction].get<double>(), 0.05);
  // No smaller point tried is under the target.
  for (const auto& p : a[advice_stat::kPoints]) {
    if (p[advice_stat::kCacheBytes].get<uint64_t>() < chosen && p[advice_stat::kTierBytes] == 0) {
      EXPECT_GE(p[advice_stat::kStallFraction].get<double>(), 0.05) << p.dump();
    }
  }
  EXPECT_NE(a[advice_stat::kText].get<std::string>().find("--cache-size"), std::string::npos);
}

TEST(Advice, AnEpochThatBarelyWaitedIsFedAndOneWithoutRoomIsUnreachable) {
  const nlohmann::json fed = Advise(Shape(), Input(200 * kMs, 600 * kMs));
  EXPECT_EQ(fed[advice_stat::kVerdict], advice_stat::kFed);
  EXPECT_TRUE(fed[advice_stat::kAdvice].is_null());
  AdviceInput tight = Input(6'000 * kMs, 20'000 * kMs);
  tight.memory_available = tight.cache_bytes;  // no more memory, no disk for a tier
  const nlohmann::json none = Advise(Shape(), tight);
  EXPECT_EQ(none[advice_stat::kVerdict], advice_stat::kUnreachable);
  EXPECT_LE(none[advice_stat::kAdvice][advice_stat::kCacheBytes].get<uint64_t>(),
            tight.cache_bytes);
}

TEST(Advice, AColdEpochWithABudgetThatHoldsTheDatasetKeepsItsSettings) {
  AdviceInput in = Input(6'000 * kMs, 20'000 * kMs);
  in.epoch.epoch = 1;
  in.cache_bytes = 2 * in.dataset_bytes;  // more than any point of the grid
  const nlohmann::json a = Advise(Shape(), in);
  EXPECT_EQ(a[advice_stat::kVerdict], advice_stat::kEnough) << a[advice_stat::kText];
  EXPECT_EQ(a[advice_stat::kAdvice][advice_stat::kCacheBytes], in.cache_bytes);
  EXPECT_EQ(a[advice_stat::kText].get<std::string>().find("--cache-size"), std::string::npos);
}

// The model's match for a cold epoch 1 (whole groups loaded, spans padded past their
// files) hits nothing, as the epoch measured; no point of the curve is below 0 or above 1.
TEST(Advice, EveryHitRatioOfTheAdviceIsWithinZeroAndOne) {
  WhatIfShape shape = Shape();
  for (uint64_t& g : shape.group_bytes) g += 4096;
  AdviceInput in = Input(6'000 * kMs, 20'000 * kMs);
  in.epoch.epoch = 1;
  in.cache_bytes = 2 * in.dataset_bytes;
  const nlohmann::json a = Advise(shape, in);
  EXPECT_DOUBLE_EQ(a[advice_stat::kModel][advice_stat::kHitRatio].get<double>(), 0.0);
  for (const auto& p : a[advice_stat::kPoints]) {
    const double ratio = p[advice_stat::kHitRatio].get<double>();
    EXPECT_GE(ratio, 0.0) << p.dump();
    EXPECT_LE(ratio, 1.0) << p.dump();
  }
  EXPECT_EQ(a[advice_stat::kText].get<std::string>().find("hit ratio -"), std::string::npos);
}

TEST(Advice, NothingReadYetSaysSo) {
  AdviceInput in;
  EXPECT_EQ(Advise(Shape(), in)[advice_stat::kVerdict], advice_stat::kNoEpoch);
}

}  // namespace
}  // namespace gpufs
