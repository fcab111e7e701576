#include "cache/advice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gpufs {
namespace {

constexpr size_t kGroup = static_cast<size_t>(ServedFrom::kSourceGroup);
constexpr size_t kMember = static_cast<size_t>(ServedFrom::kSourceMember);
constexpr size_t kTierKind = static_cast<size_t>(ServedFrom::kDiskTier);
// The policies the model replays exactly; lru is reported as its curve (a random epoch
// makes it thrash below the dataset's size, so it is never the advice).
constexpr const char* kReplayed[] = {"consume-once", "pin"};
// Budgets tried, as shares of the dataset.
constexpr double kShares[] = {1.0 / 32, 1.0 / 16, 1.0 / 8, 3.0 / 16, 1.0 / 4, 3.0 / 8,
                              1.0 / 2,  5.0 / 8,  3.0 / 4, 7.0 / 8,  1.0,     1.05};

// Seconds of waiting per byte each kind of fetch cost the epoch's readers; see advice.h.
struct Costs {
  std::array<double, kServedFromCount> per_byte{};
  std::array<bool, kServedFromCount> measured{};
};

Costs CostsOf(const StallEpoch& e) {
  Costs c;
  for (size_t k : {kGroup, kMember, kTierKind}) {
    if (e.delta.fetched[k] == 0) continue;
    c.per_byte[k] = e.delta.wait_ns[k] / 1e9 / static_cast<double>(e.delta.fetched[k]);
    c.measured[k] = true;
  }
  // Unmeasured kinds, by the order of their costs: member >= group >= tier per byte.
  if (!c.measured[kGroup]) c.per_byte[kGroup] = c.per_byte[kMember];
  if (!c.measured[kMember]) c.per_byte[kMember] = c.per_byte[kGroup];
  if (!c.measured[kTierKind]) c.per_byte[kTierKind] = c.per_byte[kGroup];
  return c;
}

double WaitsOf(const StallEpoch& e) {
  uint64_t waits = 0;
  for (uint64_t w : e.delta.wait_ns) waits += w;
  return waits / 1e9;
}

// The loader's own work in the epoch: what it takes when no read waits. With several
// readers each one works while others wait, so the time nobody waited hides most of it (8
// readers stalled 99.8% of a 12 s epoch took 0.2 s once fed, not the 0.02 s nobody
// waited). Each reader spent the wall time waiting or working: the mean reader's working
// time, wall - waits / readers, is that work (the readers counted are the most that waited
// at once; with none, nobody waited and the wall time is all work).
double OwnSeconds(const StallEpoch& e) {
  const double wall_s = e.delta.at_ns / 1e9;
  if (e.readers == 0) return wall_s;
  return std::max(0.0, wall_s - WaitsOf(e) / e.readers);
}

// The share of an epoch of `epoch_s` during which at least one of `readers` readers
// waits, when they wait `waits_s` in all, each at any moment with the same chance and
// independently of the others: 1 - (1 - p)^readers, p = waits / (readers x epoch). Rare
// waits rarely overlap (their union is their sum); frequent ones mostly do.
double AnyWaiting(double waits_s, double epoch_s, uint32_t readers) {
  if (epoch_s <= 0 || waits_s <= 0) return 0.0;
  const double n = std::max<uint32_t>(readers, 1);
  const double p = std::min(1.0, waits_s / (n * epoch_s));
  return 1.0 - std::pow(1.0 - p, n);
}

std::string MiB(uint64_t bytes) { return fmt::format("{}MiB", (bytes + (1 << 20) - 1) >> 20); }

std::string Pct(double f) { return fmt::format("{:.1f}%", 100 * f); }

nlohmann::json PointJson(const Prediction& p) {
  using namespace advice_stat;
  return {{kPolicy, p.point.policy},
          {kCacheBytes, p.point.cache_bytes},
          {kTierBytes, p.point.tier_bytes},
          {kHitRatio, p.point.HitRatio()},
          {kSourceBytes, p.point.bytes_from_source},
          {kTierReadBytes, p.point.bytes_from_tier},
          {kStallS, p.stall_s},
          {kEpochS, p.epoch_s},
          {kStallFraction, p.StallFraction()},
          {kBound, p.bound}};
}

std::vector<WhatIfQuery> Queries(const AdviceInput& in) {
  std::vector<WhatIfQuery> q;
  std::vector<uint64_t> budgets = {in.cache_bytes};
  for (double share : kShares) budgets.push_back(static_cast<uint64_t>(in.dataset_bytes * share));
  for (const char* policy : kReplayed) {
    for (uint64_t b : budgets) q.push_back({policy, b, in.tier_bytes});
  }
  if (in.disk_available > 0) {
    const std::string policy = in.policy == "pin" ? "pin" : "consume-once";
    for (double share : {0.25, 0.5, 0.75, 1.0, 1.05}) {
      q.push_back({policy, in.cache_bytes, static_cast<uint64_t>(in.dataset_bytes * share)});
    }
  }
  return q;
}

// The smallest point of `candidates` under the target, today's policy first at equal size.
const Prediction* Smallest(const std::vector<const Prediction*>& candidates, double target,
                           const std::string& policy, bool by_tier) {
  const Prediction* best = nullptr;
  for (const Prediction* p : candidates) {
    if (p->StallFraction() >= target) continue;
    const uint64_t size = by_tier ? p->point.tier_bytes : p->point.cache_bytes;
    if (!best) {
      best = p;
      continue;
    }
    const uint64_t best_size = by_tier ? best->point.tier_bytes : best->point.cache_bytes;
    if (size < best_size || (size == best_size && p->point.policy == policy)) best = p;
  }
  return best;
}

std::string WaitedOn(const StallEpoch& e) {
  size_t most = kGroup;
  for (size_t k : {kMember, kTierKind}) {
    if (e.delta.wait_ns[k] > e.delta.wait_ns[most]) most = k;
  }
  switch (most) {
    case kMember:
      return "members read alone from the source (a round trip each)";
    case kTierKind:
      return "the disk tier";
    default:
      return "whole groups from the source";
  }
}

std::string Settings(const Prediction& p, const AdviceInput& in) {
  std::string s = fmt::format("--cache-size {}", MiB(p.point.cache_bytes));
  if (p.point.tier_bytes != in.tier_bytes) {
    s += fmt::format(" --disk-cache DIR --disk-cache-size {}", MiB(p.point.tier_bytes));
  }
  if (p.point.policy != in.policy) s += " --policy " + p.point.policy;
  return s;
}

std::string Words(const std::string& verdict, const AdviceInput& in, const Prediction* chosen,
                  const Prediction* best) {
  using namespace advice_stat;
  const StallEpoch& e = in.epoch;
  const std::string waited = fmt::format(
      "Readers waited on storage {} of the {} epoch ({:.1f} s of {:.1f} s)", Pct(e.StallFraction()),
      in.ended ? "last" : "current", e.delta.stalled_ns / 1e9, e.delta.at_ns / 1e9);
  if (verdict == kFed) {
    return fmt::format(
        "{}: storage is not the bottleneck. While not waiting the loader took {:.1f} MB/s; "
        "its own work (decode, augmentation, the trainer) sets the pace, so more loader "
        "workers or CPUs would help and a larger cache would not.",
        waited, e.DemandMbPerS());
  }
  auto outcome = [&](const Prediction& p) {
    return fmt::format(
        "predicted hit ratio {:.2f}, {} from the source, epoch {:.1f} s with {} stalled{}",
        p.point.HitRatio(), MiB(p.point.bytes_from_source), p.epoch_s, Pct(p.StallFraction()),
        p.bound ? " (at most: a cost this epoch did not measure was assumed)" : "");
  };
  if (verdict == kMemory || verdict == kTier) {
    return fmt::format("{}, mostly on {}. Mount with {}: {}.", waited, WaitedOn(e),
                       Settings(*chosen, in), outcome(*chosen));
  }
  return fmt::format(
      "{}, mostly on {}. Nothing this node can hold (memory {}, disk {}) brings the stall "
      "under {}; the best is {}: {}. More bandwidth to the data (peers, a closer store) or "
      "fewer bytes per epoch would.",
      waited, WaitedOn(e), MiB(in.memory_available), MiB(in.disk_available), Pct(in.target),
      Settings(*best, in), outcome(*best));
}

}  // namespace

Prediction Predict(const StallEpoch& epoch, const WhatIfPoint& point) {
  const Costs c = CostsOf(epoch);
  Prediction p;
  p.point = point;
  const uint64_t member = point.member_bytes_from_source;
  const uint64_t group = point.bytes_from_source - std::min(member, point.bytes_from_source);
  double waits_s = 0;
  for (const auto& [k, bytes] :
       {std::pair{kGroup, group}, {kMember, member}, {kTierKind, point.bytes_from_tier}}) {
    waits_s += static_cast<double>(bytes) * c.per_byte[k];
    p.bound = p.bound || (bytes > 0 && !c.measured[k]);
  }
  const uint32_t readers = std::max<uint32_t>(epoch.readers, 1);
  p.epoch_s = OwnSeconds(epoch) + waits_s / readers;
  // The stall is the union of the waits, AnyWaiting's share of the epoch, scaled so that
  // the measured epoch gives back its measured stall.
  const double wall_s = epoch.delta.at_ns / 1e9;
  const double measured = AnyWaiting(WaitsOf(epoch), wall_s, readers);
  const double scale = measured > 0 ? epoch.delta.stalled_ns / 1e9 / (wall_s * measured) : 1.0;
  p.stall_s = std::min(p.epoch_s, p.epoch_s * AnyWaiting(waits_s, p.epoch_s, readers) * scale);
  return p;
}

nlohmann::json Advise(const WhatIfShape& shape, const AdviceInput& in) {
  using namespace advice_stat;
  nlohmann::json j{{kTarget, in.target},
                   {kEnded, in.ended},
                   {kMeasured, in.epoch.Json(in.ended)},
                   {kOwnS, OwnSeconds(in.epoch)},
                   {kSettings,
                    {{kPolicy, in.policy},
                     {kCacheBytes, in.cache_bytes},
                     {kTierBytes, in.tier_bytes},
                     {kDatasetBytes, in.dataset_bytes},
                     {kMemoryAvailable, in.memory_available},
                     {kDiskAvailable, in.disk_available},
                     {kSampleRate, in.rate},
                     {kAccesses, in.accesses.size()}}}};
  if (in.accesses.empty() || in.epoch.delta.at_ns == 0) {
    j[kVerdict] = kNoEpoch;
    j[kText] = "Nothing has been read through this mount yet: run an epoch, then ask again.";
    return j;
  }
  // The warm-up is the epoch in another order: the state a previous epoch leaves.
  std::vector<uint32_t> warmup = in.accesses;
  std::reverse(warmup.begin(), warmup.end());
  std::vector<Prediction> predictions;
  for (const WhatIfPoint& point : ReplaySweep(shape, warmup, in.accesses, in.rate, Queries(in))) {
    predictions.push_back(Predict(in.epoch, point));
  }
  j[kModel] = PointJson(predictions.front());  // today's budget and policy come first
  const std::string today = in.policy == "pin" ? "pin" : "consume-once";
  for (const Prediction& p : predictions) {
    if (&p != &predictions.front()) j[kPoints].push_back(PointJson(p));
  }
  if (in.policy != "pin" && in.policy != "consume-once") {
    j[kModel] = nullptr;  // lru: only its curve
  }
  for (const MissRatioPoint& m : LruMissRatioCurve(shape, in.accesses, in.rate)) {
    j[kLru].push_back({{kCacheBytes, m.cache_bytes}, {kHitRatio, m.hit_ratio}});
  }
  std::vector<const Prediction*> memory, tier;
  const Prediction* best = nullptr;
  for (const Prediction& p : predictions) {
    const bool fits = p.point.cache_bytes <= std::max(in.memory_available, in.cache_bytes);
    const bool tier_fits = p.point.tier_bytes <= std::max(in.disk_available, in.tier_bytes);
    if (!fits || !tier_fits) continue;
    (p.point.tier_bytes == in.tier_bytes ? memory : tier).push_back(&p);
    if (!best || p.epoch_s < best->epoch_s) best = &p;
  }
  const Prediction* chosen = nullptr;
  std::string verdict = kFed;
  if (in.epoch.StallFraction() >= in.target) {
    if ((chosen = Smallest(memory, in.target, today, false))) {
      verdict = kMemory;
    } else if ((chosen = Smallest(tier, in.target, today, true))) {
      verdict = kTier;
    } else {
      verdict = kUnreachable;
    }
  }
  if (verdict == kUnreachable && !best) best = &predictions.front();
  j[kVerdict] = verdict;
  j[kAdvice] = chosen                            ? PointJson(*chosen)
               : best && verdict == kUnreachable ? PointJson(*best)
                                                 : nlohmann::json();
  j[kText] = Words(verdict, in, chosen, best);
  return j;
}

}  // namespace gpufs
