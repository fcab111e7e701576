#include "cache/advice.h"

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

TEST(Advice, NothingReadYetSaysSo) {
  AdviceInput in;
  EXPECT_EQ(Advise(Shape(), in)[advice_stat::kVerdict], advice_stat::kNoEpoch);
}

}  // namespace
}  // namespace gpufs
