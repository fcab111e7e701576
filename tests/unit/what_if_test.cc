// The what-if model: LRU's miss-ratio curve against a plain LRU simulation, the replay
// against the real group cache, the sampled replay against the unsampled one, and the
// access trace's bounds.
#include "cache/account/what_if.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <list>
#include <numeric>
#include <optional>
#include <random>

#include "cache/cache_stat.h"
#include "cache/group_cache.h"
#include "dataset/catalog_builder.h"
#include "tests/unit/fake_source.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

// `groups` groups of `members` files each; group g's files are g * members ... Group sizes
// are the sums of their files'.
WhatIfShape MakeShape(uint32_t groups, uint32_t members, std::vector<uint64_t> file_bytes) {
  WhatIfShape shape;
  shape.group_bytes.assign(groups, 0);
  for (uint32_t f = 0; f < groups * members; ++f) {
    shape.file_group.push_back(f / members);
    shape.file_bytes.push_back(file_bytes[f]);
    shape.group_bytes[f / members] += file_bytes[f];
  }
  return shape;
}

WhatIfShape EqualShape(uint32_t groups, uint32_t members, uint64_t file_bytes) {
  return MakeShape(groups, members, std::vector<uint64_t>(groups * members, file_bytes));
}

WhatIfShape VariedShape(uint32_t groups, uint32_t members, std::mt19937& rng) {
  std::uniform_int_distribution<uint64_t> bytes(1000, 40000);
  std::vector<uint64_t> sizes(groups * members);
  for (uint64_t& b : sizes) b = bytes(rng);
  return MakeShape(groups, members, sizes);
}

// The plain simulation the curve must agree with: a list of groups, most recent first; a
// miss evicts the least recent until the group fits, and is not cached when it cannot fit
// even alone (the cache's Admit, which evicts what it can and then gives up).
uint64_t BruteLruHits(const WhatIfShape& shape, const std::vector<uint32_t>& accesses,
                      uint64_t budget) {
  std::list<uint32_t> order;
  uint64_t used = 0;
  uint64_t hits = 0;
  for (uint32_t file : accesses) {
    const uint32_t g = shape.file_group[file];
    auto it = std::find(order.begin(), order.end(), g);
    if (it != order.end()) {
      ++hits;
      order.splice(order.begin(), order, it);
      continue;
    }
    while (!order.empty() && used + shape.group_bytes[g] > budget) {
      used -= shape.group_bytes[order.back()];
      order.pop_back();
    }
    if (used + shape.group_bytes[g] > budget) continue;
    order.push_front(g);
    used += shape.group_bytes[g];
  }
  return hits;
}

// The curve's hit ratio at `budget`: that of the last point at or under it.
double CurveAt(const std::vector<MissRatioPoint>& curve, uint64_t budget) {
  double ratio = 0;
  for (const MissRatioPoint& p : curve) {
    if (p.cache_bytes > budget) break;
    ratio = p.hit_ratio;
  }
  return ratio;
}

// At every budget where the curve changes, one byte under it, and a spread of others, the
// curve, the brute-force LRU and the lru replay give the same hits. Equal for varied group
// sizes too, not only equal ones: LRU evicts only from the bottom of the recency stack, so
// what it holds is always the longest prefix of the stack that fits (a miss that cannot fit
// even alone empties it), and a group is in that prefix exactly when the bytes down to it,
// its stack distance, fit.
void ExpectCurveMatchesLru(const WhatIfShape& shape, const std::vector<uint32_t>& accesses) {
  const std::vector<MissRatioPoint> curve = LruMissRatioCurve(shape, accesses, 1.0);
  ASSERT_TRUE(std::is_sorted(curve.begin(), curve.end(), [](const auto& a, const auto& b) {
    return a.cache_bytes < b.cache_bytes;
  }));
  const uint64_t total =
      std::accumulate(shape.group_bytes.begin(), shape.group_bytes.end(), uint64_t{0});
  std::vector<uint64_t> budgets = {0, 1, total / 7, total / 3, total / 2, total, total * 2};
  // Each point where the curve changes, and a byte below it: up to 64 of them, spread
  // evenly, so that a curve of varied sizes (thousands of points) stays quick to check
  // by brute force (under the sanitizers too).
  const size_t step = std::max<size_t>(1, curve.size() / 64);
  for (size_t i = 0; i < curve.size(); i += step) {
    budgets.push_back(curve[i].cache_bytes);
    budgets.push_back(curve[i].cache_bytes - 1);
  }
  const double reads = static_cast<double>(accesses.size());
  for (uint64_t budget : budgets) {
    const uint64_t hits = BruteLruHits(shape, accesses, budget);
    EXPECT_DOUBLE_EQ(CurveAt(curve, budget), static_cast<double>(hits) / reads)
        << "budget " << budget;
    const WhatIfPoint replay = Replay(shape, {}, accesses, 1.0, "lru", budget, 0);
    EXPECT_EQ(replay.memory_hits, hits) << "budget " << budget;
  }
}

std::vector<uint32_t> UniformTrace(size_t n, uint32_t files, std::mt19937& rng) {
  std::uniform_int_distribution<uint32_t> file(0, files - 1);
  std::vector<uint32_t> trace(n);
  for (uint32_t& f : trace) f = file(rng);
  return trace;
}

// Groups drawn by a Zipf law of exponent 1 (group 0 the most popular), any member of each.
std::vector<uint32_t> ZipfTrace(size_t n, uint32_t groups, uint32_t members, std::mt19937& rng) {
  std::vector<double> weights(groups);
  for (uint32_t g = 0; g < groups; ++g) weights[g] = 1.0 / (g + 1);
  std::discrete_distribution<uint32_t> group(weights.begin(), weights.end());
  std::uniform_int_distribution<uint32_t> member(0, members - 1);
  std::vector<uint32_t> trace(n);
  for (uint32_t& f : trace) f = group(rng) * members + member(rng);
  return trace;
}

TEST(LruMissRatioCurve, MatchesLruOnRandomTraces) {
  std::mt19937 rng(7);
  for (bool varied : {false, true}) {
    SCOPED_TRACE(varied ? "varied sizes" : "equal sizes");
    const WhatIfShape shape = varied ? VariedShape(60, 4, rng) : EqualShape(60, 4, 4096);
    ExpectCurveMatchesLru(shape, UniformTrace(3000, 240, rng));
    ExpectCurveMatchesLru(shape, ZipfTrace(3000, 60, 4, rng));
  }
}

TEST(LruMissRatioCurve, MatchesLruOnAdversarialTraces) {
  std::mt19937 rng(11);
  for (bool varied : {false, true}) {
    SCOPED_TRACE(varied ? "varied sizes" : "equal sizes");
    const WhatIfShape shape = varied ? VariedShape(20, 2, rng) : EqualShape(20, 2, 4096);
    std::vector<uint32_t> cyclic;  // 11 groups in turn: LRU with room for 10 never hits
    for (int round = 0; round < 30; ++round) {
      for (uint32_t g = 0; g < 11; ++g) cyclic.push_back(2 * g + round % 2);
    }
    ExpectCurveMatchesLru(shape, cyclic);
    ExpectCurveMatchesLru(shape, std::vector<uint32_t>(100, 3));  // one group, again
    std::vector<uint32_t> alternating;  // groups 0-4, then 5-14, and again
    for (int round = 0; round < 20; ++round) {
      for (uint32_t g = 0; g < 5; ++g) alternating.push_back(2 * g);
      for (uint32_t g = 5; g < 15; ++g) alternating.push_back(2 * g + 1);
    }
    ExpectCurveMatchesLru(shape, alternating);
  }
}

TEST(LruMissRatioCurve, CyclicScanJustAboveTheBudgetNeverHits) {
  const WhatIfShape shape = EqualShape(11, 1, 4096);
  std::vector<uint32_t> cyclic;
  for (int round = 0; round < 10; ++round) {
    for (uint32_t g = 0; g < 11; ++g) cyclic.push_back(g);
  }
  const auto curve = LruMissRatioCurve(shape, cyclic, 1.0);
  EXPECT_EQ(CurveAt(curve, 10 * 4096), 0.0);
  EXPECT_DOUBLE_EQ(CurveAt(curve, 11 * 4096), 99.0 / 110.0);  // all but the first round
  ASSERT_EQ(curve.size(), 1u);                                // every distance is the whole cycle
  EXPECT_EQ(curve[0].cache_bytes, 11u * 4096);
}

TEST(LruMissRatioCurve, ScalesBudgetsByTheRate) {
  const WhatIfShape shape = EqualShape(4, 1, 1000);
  const auto curve = LruMissRatioCurve(shape, {0, 1, 0, 1}, 0.1);
  ASSERT_EQ(curve.size(), 1u);
  EXPECT_EQ(curve[0].cache_bytes, 20000u);  // 2000 sampled bytes at a tenth
  EXPECT_DOUBLE_EQ(curve[0].hit_ratio, 0.5);
}

// The replay against the real cache: the dataset of `kGroups` groups of `kMembers` files of
// `kFile` bytes (a group a whole number of arena pages, so the arena's first-fit room is
// the model's sum of sizes), read one file at a time by one reader, prefetch off.
class ReplayVsCacheTest : public ::testing::Test {
 protected:
  static constexpr uint32_t kGroups = 8;
  static constexpr uint32_t kMembers = 4;
  static constexpr uint64_t kFile = 4096;
  static constexpr uint64_t kGroup = kMembers * kFile;

  void SetUp() override {
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"c"};
    std::vector<std::string> blobs;
    for (uint32_t g = 0; g < kGroups; ++g) {
      std::string bytes;
      for (uint32_t m = 0; m < kMembers; ++m) {
        spec.members.push_back(MemberSpec{"c/" + std::to_string(g) + "-" + std::to_string(m), 0, g,
                                          bytes.size(), kFile, 0, 0});
        bytes += std::string(kFile, static_cast<char>('a' + (g + m) % 26));
      }
      spec.groups.push_back(GroupSpec{"blob-" + std::to_string(g), 0, bytes.size(), 0});
      blobs.push_back(bytes);
    }
    catalog_ = std::make_unique<Catalog>(std::move(*CatalogFromSpec(spec)));
    source_ = std::make_unique<FakeSource>(blobs);
    for (uint32_t i = 0; i < catalog_->file_count(); ++i) {
      shape_.file_group.push_back(catalog_->ExtentAt(i).group);
      shape_.file_bytes.push_back(catalog_->ExtentAt(i).size);
    }
    for (uint32_t g = 0; g < catalog_->group_count(); ++g) {
      shape_.group_bytes.push_back(catalog_->Group(g).size);
    }
    std::mt19937 rng(5);
    for (auto* epoch : {&first_, &second_}) {
      epoch->resize(catalog_->file_count());
      std::iota(epoch->begin(), epoch->end(), 0);
      std::shuffle(epoch->begin(), epoch->end(), rng);
    }
  }

  struct Measured {
    uint64_t memory_hits = 0;
    uint64_t bytes_from_source = 0;
    uint64_t tier_reads = 0;
    uint64_t staged = 0;  // groups staged into the tier
  };

  // Two epochs through a fresh cache, and a fresh tier with room for `tier_groups` groups
  // (none: no tier); the counts of each epoch.
  std::pair<Measured, Measured> RunCache(const std::string& policy, uint64_t budget,
                                         std::optional<uint32_t> tier_groups) {
    TempDir dir;
    std::unique_ptr<DiskTier> tier;
    if (tier_groups) {
      // A copy is its payload and a 4 KiB header (disk_tier.h).
      auto opened = DiskTier::Open(
          DiskTierOptions{dir.path(), "w-0123456789abcdef", *tier_groups * (kGroup + 4096), 0});
      EXPECT_TRUE(opened.ok());
      tier = std::move(*opened);
    }
    auto arena = std::move(*PinnedArena::Create(budget));
    EXPECT_EQ(arena->capacity(), budget);
    GroupSizes sizes(kGroups, kMembers);
    GroupCache cache(*catalog_, *source_, *arena, MakePolicy(policy, sizes, kGroups * kMembers),
                     CacheOptions{policy, 0, 0}, tier.get());
    refused_claims_ = 0;
    ReadEpoch(cache, tier.get(), first_);
    const Measured first = Counts(cache);
    ReadEpoch(cache, tier.get(), second_);
    const Measured after = Counts(cache);
    return {
        first,
        {after.memory_hits - first.memory_hits, after.bytes_from_source - first.bytes_from_source,
         after.tier_reads - first.tier_reads, after.staged - first.staged}};
  }

  void ReadEpoch(GroupCache& cache, DiskTier* tier, const std::vector<uint32_t>& order) {
    for (uint32_t file : order) {
      const bool full_before = tier && tier->Full();
      const uint64_t skips_before =
          tier ? Staging(cache)[staging_stat::kFullSkips].get<uint64_t>() : 0;
      auto bytes = cache.Read(catalog_->FileNode(file), 0, 1 << 20);
      ASSERT_TRUE(bytes.ok()) << bytes.error().message;
      ASSERT_EQ(bytes->size(), kFile);
      if (!tier) continue;
      // A group staged while the tier was not yet full asked it for room: a refusal is a
      // write the tier counts as skipped.
      if (!full_before) {
        refused_claims_ += Staging(cache)[staging_stat::kFullSkips].get<uint64_t>() - skips_before;
      }
      Settle(cache, *tier);
    }
  }

  static nlohmann::json Staging(const GroupCache& cache) {
    return cache.Stats()["tier"][tier_stat::kStaging];
  }

  // The model has no background: wait until every write the tier was asked for has ended
  // (write-backs of the groups loaded from the source, staged groups, refused claims) and
  // nothing is staging, so that the next read finds the state the model assumes.
  void Settle(const GroupCache& cache, const DiskTier& tier) {
    for (;;) {
      const nlohmann::json stats = cache.Stats();
      const nlohmann::json& staging = stats[cache_stat::kTier][tier_stat::kStaging];
      const uint64_t asked = stats[cache_stat::kGroupsLoaded].get<uint64_t>() -
                             stats[cache_stat::kTier][tier_stat::kHits].get<uint64_t>() +
                             staging[staging_stat::kStaged].get<uint64_t>() +
                             staging[staging_stat::kNotKept].get<uint64_t>() + refused_claims_;
      const nlohmann::json t = tier.Stats();
      const uint64_t ended = t[tier_stat::kWrites].get<uint64_t>() +
                             t[tier_stat::kSkipped].get<uint64_t>() +
                             t[tier_stat::kWriteErrors].get<uint64_t>();
      if (ended == asked && staging[staging_stat::kQueued] == 0 &&
          staging[staging_stat::kInFlight] == 0) {
        return;
      }
      usleep(1000);
    }
  }

  static Measured Counts(GroupCache& cache) {
    const nlohmann::json stats = cache.Stats();
    Measured m;
    m.memory_hits =
        stats[cache_stat::kHits].get<uint64_t>() + stats[cache_stat::kSharedWaits].get<uint64_t>();
    m.bytes_from_source = stats[cache_stat::kBytesFromSource];
    if (cache.has_tier()) {
      m.tier_reads = stats[cache_stat::kTier][tier_stat::kHits].get<uint64_t>() +
                     stats[cache_stat::kTier][tier_stat::kSliceHits].get<uint64_t>();
      m.staged = stats[cache_stat::kTier][tier_stat::kStaging][staging_stat::kStaged];
    }
    return m;
  }

  // Exact but for one race of the cache's: a member read that stages its group asks the
  // stager for its bytes after queueing it, and when the staging has already been written
  // and released by then (the fake source answers at once), the stager has nothing to give
  // and the member is read from the copy just written (a tier read the model counts as the
  // staging's), or, where the copy is not there either, from the source: up to one tier
  // read or one member's bytes more per group staged.
  static void ExpectSame(const WhatIfPoint& model, const Measured& real) {
    EXPECT_EQ(model.reads, kGroups * kMembers);
    EXPECT_EQ(model.bytes_served, model.reads * kFile);
    EXPECT_EQ(model.memory_hits, real.memory_hits);
    EXPECT_GE(real.bytes_from_source, model.bytes_from_source);
    EXPECT_LE(real.bytes_from_source, model.bytes_from_source + real.staged * kFile);
    EXPECT_GE(real.tier_reads, model.tier_reads);
    EXPECT_LE(real.tier_reads, model.tier_reads + real.staged);
  }

  WhatIfShape shape_;
  uint64_t refused_claims_ = 0;
  std::vector<uint32_t> first_;
  std::vector<uint32_t> second_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<FakeSource> source_;
};

// The first epoch (replayed from an empty state) and the second (after the first as its
// warm-up) against the cache's counters, exactly: one reader, settled after each read, is
// the model's assumption, and equal groups of whole pages make the arena's room a sum.
TEST_F(ReplayVsCacheTest, CountsMatchTheCacheForEachPolicyBudgetAndTier) {
  for (const std::string policy : {"consume-once", "pin", "lru"}) {
    for (uint64_t groups : {1, 2, 3, 5, 8}) {
      for (std::optional<uint32_t> tier_groups : {std::optional<uint32_t>{}, {3u}, {kGroups}}) {
        // With room for one group, lru's only victim is the group the last read loaded,
        // whose write-back pins it until the tier's write has returned and the cache has
        // retaken its lock: Settle sees the first, not the second, so the next read may find
        // it busy and read its member alone. The model has nothing busy (one reader, no
        // background), so that case is left out.
        if (policy == "lru" && groups == 1 && tier_groups) continue;
        SCOPED_TRACE(policy + ", room for " + std::to_string(groups) + " groups, tier " +
                     (tier_groups ? std::to_string(*tier_groups) : "none"));
        const uint64_t budget = groups * kGroup;
        const uint64_t tier_bytes = tier_groups ? *tier_groups * kGroup : 0;
        const auto [first, second] = RunCache(policy, budget, tier_groups);
        ExpectSame(Replay(shape_, {}, first_, 1.0, policy, budget, tier_bytes), first);
        ExpectSame(Replay(shape_, first_, second_, 1.0, policy, budget, tier_bytes), second);
      }
    }
  }
}

// 200k files in 2000 groups of 100, of varied sizes; each epoch reads every file once in
// a random order.
TEST(WhatIfSampling, ATenthOfTheGroupsGivesTheHitRatioWithinFivePoints) {
  constexpr uint32_t kGroups = 2000;
  constexpr uint32_t kMembers = 100;
  constexpr uint32_t kFiles = kGroups * kMembers;
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint64_t> bytes(60000, 160000);
  std::vector<uint64_t> sizes(kFiles);
  for (uint64_t& b : sizes) b = bytes(rng);
  const WhatIfShape shape = MakeShape(kGroups, kMembers, sizes);
  std::vector<uint32_t> first(kFiles);
  std::iota(first.begin(), first.end(), 0);
  std::vector<uint32_t> second = first;
  std::shuffle(first.begin(), first.end(), rng);
  std::shuffle(second.begin(), second.end(), rng);

  // A tenth of the files' entries (with the headroom the trace leaves for overshoot).
  AccessTrace trace(kFiles, kGroups, kFiles / 10 * 8 / 7 + 1);
  for (uint32_t f : first) trace.Record(f, shape.file_group[f]);
  trace.NextEpoch();
  const std::vector<uint32_t> warmup = trace.Last();
  for (uint32_t f : second) trace.Record(f, shape.file_group[f]);
  trace.NextEpoch();
  const std::vector<uint32_t> measured = trace.Last();
  EXPECT_NEAR(trace.rate(), 0.1, 0.001);
  EXPECT_EQ(trace.dropped(), 0u);
  EXPECT_NEAR(static_cast<double>(measured.size()) / kFiles, 0.1, 0.03);

  const uint64_t total =
      std::accumulate(shape.group_bytes.begin(), shape.group_bytes.end(), uint64_t{0});
  for (double fraction : {0.05, 0.2, 0.5, 0.8, 1.0}) {
    for (double tier : {0.0, 0.4}) {
      const auto budget = static_cast<uint64_t>(fraction * static_cast<double>(total));
      const auto tier_bytes = static_cast<uint64_t>(tier * static_cast<double>(total));
      const WhatIfPoint full =
          Replay(shape, first, second, 1.0, "consume-once", budget, tier_bytes);
      const WhatIfPoint sampled =
          Replay(shape, warmup, measured, trace.rate(), "consume-once", budget, tier_bytes);
      EXPECT_NEAR(*sampled.HitRatio(), *full.HitRatio(), 0.05)
          << "budget " << fraction << " of the dataset, tier " << tier;
      EXPECT_NEAR(static_cast<double>(sampled.reads), kFiles, 0.2 * kFiles);
    }
  }
}

// The model's hit ratio is the stall account's: the share of the bytes served that the
// source did not send for the epoch. Whole groups (here spans padded past their files, as
// the arena aligns them) and a thrashing lru fetch more than is served; the ratio counts
// served bytes only, so it is 0 at the least, never below.
TEST(WhatIfReplay, TheHitRatioCountsServedBytesAndNeverGoesBelowZero) {
  WhatIfShape shape = EqualShape(16, 8, 1000);
  for (uint64_t& g : shape.group_bytes) g += 4096;  // each group's aligned span
  std::vector<uint32_t> epoch(16 * 8);
  std::iota(epoch.begin(), epoch.end(), 0);
  std::shuffle(epoch.begin(), epoch.end(), std::mt19937(3));
  const uint64_t dataset = 16 * (8 * 1000 + 4096);
  const WhatIfPoint cold = Replay(shape, {}, epoch, 1.0, "consume-once", dataset, 0);
  EXPECT_GT(cold.bytes_from_source, cold.bytes_served);
  EXPECT_DOUBLE_EQ(*cold.HitRatio(), 0.0);  // every byte came from the source, once
  const WhatIfPoint warm = Replay(shape, epoch, epoch, 1.0, "consume-once", dataset, 0);
  EXPECT_DOUBLE_EQ(*warm.HitRatio(), 1.0);
  const WhatIfPoint thrash = Replay(shape, epoch, epoch, 1.0, "lru", dataset / 4, 0);
  EXPECT_GT(thrash.bytes_from_source, thrash.bytes_served);
  EXPECT_GE(*thrash.HitRatio(), 0.0);
  EXPECT_LT(*thrash.HitRatio(), 0.5);
  // Half the dataset kept by consume-once: about half the bytes are hits.
  const WhatIfPoint half = Replay(shape, epoch, epoch, 1.0, "consume-once", dataset / 2, 0);
  EXPECT_GT(*half.HitRatio(), 0.3);
  EXPECT_LT(*half.HitRatio(), 0.7);
  EXPECT_FALSE(WhatIfPoint{}.HitRatio().has_value());  // nothing served: not measured
}

TEST(AccessTrace, KeepsEveryGroupWhileAnEpochFits) {
  AccessTrace trace(100, 10, 1000);
  EXPECT_EQ(trace.rate(), 1.0);
  EXPECT_TRUE(trace.Last().empty());
  trace.Record(5, 0);
  trace.Record(7, 1);
  EXPECT_EQ(trace.Current(), (std::vector<uint32_t>{5, 7}));
  trace.NextEpoch();
  EXPECT_EQ(trace.Last(), (std::vector<uint32_t>{5, 7}));
  EXPECT_TRUE(trace.Current().empty());
  trace.Record(9, 2);
  trace.NextEpoch();
  EXPECT_EQ(trace.Last(), (std::vector<uint32_t>{9}));
  for (uint32_t g = 0; g < 10; ++g) EXPECT_TRUE(trace.Sampled(g));
}

TEST(AccessTrace, SamplesGroupsAndStaysWithinItsEntries) {
  constexpr size_t kMax = 1000;
  constexpr uint32_t kGroups = 20000;
  AccessTrace trace(kGroups * 50, kGroups, kMax);
  EXPECT_LT(trace.rate(), 1000.0 / (kGroups * 50));
  uint32_t kept = 0;
  for (uint32_t g = 0; g < kGroups; ++g) kept += trace.Sampled(g);
  EXPECT_NEAR(static_cast<double>(kept) / kGroups, trace.rate(), 0.0005);
  // Each file five times over: the sample overshoots, and the rest is dropped.
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int pass = 0; pass < 5; ++pass) {
      for (uint32_t f = 0; f < kGroups * 50; ++f) trace.Record(f, f / 50);
    }
    EXPECT_EQ(trace.Current().size(), kMax);
    trace.NextEpoch();
    EXPECT_EQ(trace.Last().size(), kMax);
    for (uint32_t f : trace.Last()) EXPECT_TRUE(trace.Sampled(f / 50));
    EXPECT_LE(trace.memory_bytes(), sizeof(AccessTrace) + 2 * kMax * sizeof(uint32_t));
  }
  EXPECT_GT(trace.dropped(), 0u);
}

// Not a check: how long Replay takes on a million accesses (run with
// --gtest_also_run_disabled_tests --gtest_filter='*Times*').
TEST(WhatIfTiming, DISABLED_TimesReplayAndTheCurveOnAMillionAccesses) {
  constexpr uint32_t kGroups = 10000;
  constexpr uint32_t kMembers = 100;
  std::mt19937 rng(1);
  const WhatIfShape shape = EqualShape(kGroups, kMembers, 110000);
  std::vector<uint32_t> epoch(kGroups * kMembers);
  std::iota(epoch.begin(), epoch.end(), 0);
  std::shuffle(epoch.begin(), epoch.end(), rng);
  const uint64_t total = uint64_t{kGroups} * kMembers * 110000;
  auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (const std::string policy : {"consume-once", "pin", "lru"}) {
    const auto start = std::chrono::steady_clock::now();
    const WhatIfPoint p = Replay(shape, epoch, epoch, 1.0, policy, total / 4, total / 2);
    std::printf("%s: %.3f s for 2 x %zu accesses, hit ratio %.3f\n", policy.c_str(),
                seconds_since(start), epoch.size(), p.HitRatio().value_or(-1));
  }
  std::vector<WhatIfQuery> sweep;
  for (int i = 1; i <= 40; ++i) sweep.push_back({"consume-once", total * i / 40, 0});
  auto start = std::chrono::steady_clock::now();
  const auto points = ReplaySweep(shape, epoch, epoch, 1.0, sweep);
  std::printf("consume-once sweep of %zu budgets: %.3f s\n", points.size(), seconds_since(start));
  start = std::chrono::steady_clock::now();
  const auto curve = LruMissRatioCurve(shape, epoch, 1.0);
  std::printf("lru curve: %.3f s, %zu points\n", seconds_since(start), curve.size());
}

TEST(ReplaySweep, GivesWhatEachReplayGives) {
  std::mt19937 rng(9);
  const WhatIfShape shape = VariedShape(50, 10, rng);
  const std::vector<uint32_t> trace = UniformTrace(2000, 500, rng);
  const std::vector<WhatIfQuery> queries = {
      {"consume-once", 200000, 0}, {"pin", 400000, 1000000}, {"lru", 300000, 0}, {"none", 1, 1}};
  const std::vector<WhatIfPoint> points = ReplaySweep(shape, trace, trace, 0.5, queries);
  ASSERT_EQ(points.size(), queries.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    const WhatIfPoint one = Replay(shape, trace, trace, 0.5, queries[i].policy,
                                   queries[i].cache_bytes, queries[i].tier_bytes);
    EXPECT_EQ(points[i].policy, queries[i].policy);
    EXPECT_EQ(points[i].memory_hits, one.memory_hits);
    EXPECT_EQ(points[i].bytes_from_source, one.bytes_from_source);
    EXPECT_EQ(points[i].bytes_from_tier, one.bytes_from_tier);
    EXPECT_EQ(points[i].reads, queries[i].policy == "none" ? 0u : 4000u);  // scaled by 1/0.5
  }
  EXPECT_GT(points[1].memory_hits, 0u);
}

}  // namespace
}  // namespace gpufs
