#include "cache/advice.h"

#include <gtest/gtest.h>

namespace gpufs {
namespace {

constexpr uint64_t kS = 1'000'000'000;
constexpr size_t kMember = static_cast<size_t>(ServedFrom::kSourceMember);

// An epoch of `wall_s` in which `readers` readers stalled `stalled_s` of it, all on
// members read alone: `member_bytes` fetched, their reads waiting `waits_s` in all.
StallEpoch MemberEpoch(uint64_t wall_s, uint64_t stalled_s, uint64_t waits_s, uint32_t readers,
                       uint64_t member_bytes) {
  StallEpoch e;
  e.delta.at_ns = wall_s * kS;
  e.delta.stalled_ns = stalled_s * kS;
  e.delta.wait_ns[kMember] = waits_s * kS;
  e.delta.fetched[kMember] = member_bytes;
  e.readers = readers;
  return e;
}

WhatIfPoint MemberPoint(uint64_t member_bytes) {
  WhatIfPoint p;
  p.policy = "consume-once";
  p.bytes_from_source = member_bytes;
  p.member_bytes_from_source = member_bytes;
  return p;
}

TEST(Predict, TodaysPointGivesBackTheMeasuredEpoch) {
  const StallEpoch e = MemberEpoch(12, 10, 60, 8, 1000);
  const Prediction p = Predict(e, MemberPoint(1000));
  EXPECT_NEAR(p.stall_s, 10.0, 1e-9);
  EXPECT_NEAR(p.epoch_s, 12.0, 1e-9);
  EXPECT_FALSE(p.bound);
}

// One reader's waits never overlap: its stall is their sum, and its epoch its own work
// (the time it did not wait) plus that.
TEST(Predict, OneReadersStallIsItsWaitsPricedByTheByte) {
  const StallEpoch e = MemberEpoch(10, 6, 6, 1, 1000);
  const Prediction half = Predict(e, MemberPoint(500));
  EXPECT_NEAR(half.stall_s, 3.0, 1e-9);
  EXPECT_NEAR(half.epoch_s, 4.0 + 3.0, 1e-9);
  EXPECT_NEAR(Predict(e, MemberPoint(0)).epoch_s, 4.0, 1e-9);
}

// Eight readers stalled 99% of a 10 s epoch but each worked 1 s of it, overlapped with the
// others' waits: fed, the epoch takes that second, not the 0.1 s nobody waited.
TEST(Predict, AFedEpochTakesTheReadersOwnWorkThatTheWaitsHid) {
  StallEpoch e = MemberEpoch(10, 10, 72, 8, 1000);
  e.delta.stalled_ns -= kS / 10;
  const Prediction fed = Predict(e, MemberPoint(0));
  EXPECT_DOUBLE_EQ(fed.stall_s, 0.0);
  EXPECT_NEAR(fed.epoch_s, 1.0, 1e-9);
  EXPECT_DOUBLE_EQ(fed.StallFraction(), 0.0);
  // Half the bytes: each reader waits half as long, 36 s / 8, beside its own second.
  const Prediction half = Predict(e, MemberPoint(500));
  EXPECT_NEAR(half.epoch_s, 1.0 + 4.5, 1e-9);
  EXPECT_GT(half.StallFraction(), 0.95);  // someone still waits nearly all the time
  EXPECT_LE(half.stall_s, half.epoch_s);
}

// A few misses among eight readers rarely overlap: their stall is near their waits' sum, not
// the same share of the measured stall as of its bytes, which the overlap of many misses
// made small.
TEST(Predict, RareMissesOverlapLessThanManyDo) {
  StallEpoch e = MemberEpoch(10, 10, 72, 8, 1000);
  e.delta.stalled_ns -= kS / 10;
  const Prediction rare = Predict(e, MemberPoint(10));  // 1% of the bytes, 0.72 s of waits
  EXPECT_GT(rare.stall_s, 3 * 0.01 * 9.9);
  EXPECT_LE(rare.stall_s, 0.72);
}

// The advice names the fed epoch's time beside its points, for the plot's no-stall line.
TEST(Advise, SaysWhatAFedEpochTakes) {
  WhatIfShape shape;
  shape.file_group = {0, 0, 1, 1};
  shape.file_bytes = {100, 100, 100, 100};
  shape.group_bytes = {200, 200};
  AdviceInput in;
  in.epoch = MemberEpoch(10, 10, 72, 8, 400);
  in.ended = true;
  in.accesses = {0, 1, 2, 3};
  in.policy = "consume-once";
  in.cache_bytes = 100;
  in.dataset_bytes = 400;
  in.memory_available = 1000;
  const nlohmann::json advice = Advise(shape, in);
  EXPECT_NEAR(advice[advice_stat::kOwnS].get<double>(), 1.0, 1e-9);
  EXPECT_EQ(advice[advice_stat::kVerdict], advice_stat::kMemory);
  ASSERT_TRUE(advice[advice_stat::kAdvice].is_object());
  EXPECT_GE(advice[advice_stat::kAdvice][advice_stat::kEpochS].get<double>(), 1.0);
}

}  // namespace
}  // namespace gpufs
