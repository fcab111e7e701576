#include "cache/account/advice.h"

#include "base/sizes.h"
#include "cache/policy/policy.h"

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
constexpr std::string_view kReplayed[] = {policy_name::kConsumeOnce, policy_name::kPin};
// Budgets tried, as shares of the dataset.
constexpr double kShares[] = {1.0 / 32, 1.0 / 16, 1.0 / 8, 3.0 / 16, 1.0 / 4, 3.0 / 8,
                              1.0 / 2,  5.0 / 8,  3.0 / 4, 7.0 / 8,  1.0,     1.05};

// Nanoseconds of reader waits per byte each kind of fetch cost in the epoch; see advice.h.
struct Costs {
  std::array<double, kServedFromCount> per_byte{};
  std::array<bool, kServedFromCount> measured{};
};

Costs CostsOf(const StallEpoch& e) {
  Costs c;
  for (size_t k : {kGroup, kMember, kTierKind}) {
    if (e.delta.fetched[k] == 0) continue;
    c.per_byte[k] = static_cast<double>(e.delta.wait_ns[k]) / e.delta.fetched[k];
    c.measured[k] = true;
  }
  // Unmeasured kinds, by the order of their costs: member >= group >= tier per byte.
  if (!c.measured[kGroup]) c.per_byte[kGroup] = c.per_byte[kMember];
  if (!c.measured[kMember]) c.per_byte[kMember] = c.per_byte[kGroup];
  if (!c.measured[kTierKind]) c.per_byte[kTierKind] = c.per_byte[kGroup];
  return c;
}

uint64_t WaitNs(const StallEpoch& e) {
  return e.delta.wait_ns[kGroup] + e.delta.wait_ns[kMember] + e.delta.wait_ns[kTierKind];
}

// The share of an epoch of `epoch_s` during which at least one of `readers` readers
// waits, when they wait `waits_s` in all, each at any moment with the same chance and
// independently of the others: 1 - (1 - p)^readers, p = waits / (readers x epoch). Rare
// waits rarely overlap (their union nears their sum); frequent ones mostly do.
double AnyWaiting(double waits_s, double epoch_s, double readers) {
  if (epoch_s <= 0 || waits_s <= 0) return 0.0;
  const double p = std::min(1.0, waits_s / (readers * epoch_s));
  return 1.0 - std::pow(1.0 - p, readers);
}

// The loader's own time in the epoch, the mean reader's time not waiting: what an epoch
// with no wait takes (advice.h).
double LoaderSeconds(const StallEpoch& e) {
  const double readers = std::max(1u, e.peak_waiting);
  return std::max(0.0, e.delta.at_ns / 1e9 - WaitNs(e) / readers / 1e9);
}

// Rounded up, so that the budget it names is never below the one modelled.
std::string MiB(uint64_t bytes) {
  return FormatSize(bytes, {.unit = SizeScale::kMega, .rounding = SizeStyle::kUp, .separator = ""});
}

std::string Pct(double f) { return fmt::format("{:.1f}%", 100 * f); }

// A ratio not measured (nothing served) is null in JSON and "-" in words.
nlohmann::json RatioJson(std::optional<double> r) {
  return r ? nlohmann::json(*r) : nlohmann::json();
}
std::string RatioText(std::optional<double> r) { return r ? fmt::format("{:.2f}", *r) : "-"; }

nlohmann::json PointJson(const Prediction& p) {
  using namespace advice_stat;
  return {{kPolicy, p.point.policy},
          {kCacheBytes, p.point.cache_bytes},
          {kTierBytes, p.point.tier_bytes},
          {kHitRatio, RatioJson(p.point.HitRatio())},
          {kSourceBytes, p.point.bytes_from_source},
          {kTierReadBytes, p.point.bytes_from_tier},
          {kStallS, p.stall_s},
          {kEpochS, p.epoch_s},
          {kStallFraction, p.StallFraction()},
          {kBound, p.bound}};
}

// The policy the tier's points and ties favour: today's, where the advice may name it.
std::string ReplayedPolicy(const AdviceInput& in) {
  return std::string(in.policy == policy_name::kPin ? policy_name::kPin
                                                    : policy_name::kConsumeOnce);
}

// Today's settings first (any policy replays exactly), then the grid.
std::vector<WhatIfQuery> Queries(const AdviceInput& in) {
  std::vector<WhatIfQuery> q = {{in.policy, in.cache_bytes, in.tier_bytes}};
  for (std::string_view policy : kReplayed) {
    for (double share : kShares) {
      q.push_back(
          {std::string(policy), static_cast<uint64_t>(in.dataset_bytes * share), in.tier_bytes});
    }
  }
  if (in.disk_available > 0) {
    for (double share : {0.25, 0.5, 0.75, 1.0, 1.05}) {
      q.push_back(
          {ReplayedPolicy(in), in.cache_bytes, static_cast<uint64_t>(in.dataset_bytes * share)});
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
        "predicted hit ratio {}, {} from the source, epoch {:.1f} s with {} stalled{}",
        RatioText(p.point.HitRatio()), MiB(p.point.bytes_from_source), p.epoch_s,
        Pct(p.StallFraction()),
        p.bound ? " (at most: a cost this epoch did not measure was assumed)" : "");
  };
  const std::string cold =
      e.epoch == 1 ? " Epoch 1 began with nothing cached (every byte came from the source, as "
                     "it must once); the prediction is for the epochs after it, which the "
                     "kernel's page cache may also serve where it holds the files (gpufs-stat "
                     "PATH shows how much)."
                   : "";
  if (verdict == kEnough) {
    return fmt::format(
        "{}, mostly on {}. With today's settings the epochs after it are "
        "predicted under {}: {}. Nothing to change.{}",
        waited, WaitedOn(e), Pct(in.target), outcome(*chosen), cold);
  }
  if (verdict == kMemory || verdict == kTier) {
    return fmt::format("{}, mostly on {}. Mount with {}: {}.{}", waited, WaitedOn(e),
                       Settings(*chosen, in), outcome(*chosen), cold);
  }
  return fmt::format(
      "{}, mostly on {}. Nothing this node can hold (memory {}, disk {}) brings the stall "
      "under {}; the best is {}: {}. More bandwidth to the data (peers, a closer store) or "
      "fewer bytes per epoch would.{}",
      waited, WaitedOn(e), MiB(in.memory_available), MiB(in.disk_available), Pct(in.target),
      Settings(*best, in), outcome(*best), cold);
}

}  // namespace

Prediction Predict(const StallEpoch& epoch, const WhatIfPoint& point) {
  const Costs c = CostsOf(epoch);
  Prediction p;
  p.point = point;
  const uint64_t member = point.member_bytes_from_source;
  const uint64_t group = point.bytes_from_source - std::min(member, point.bytes_from_source);
  double wait_ns = 0;
  for (const auto& [k, bytes] :
       {std::pair{kGroup, group}, {kMember, member}, {kTierKind, point.bytes_from_tier}}) {
    wait_ns += static_cast<double>(bytes) * c.per_byte[k];
    p.bound = p.bound || (bytes > 0 && !c.measured[k]);
  }
  const double readers = std::max(1u, epoch.peak_waiting);
  const double measured_wait = static_cast<double>(WaitNs(epoch));
  p.epoch_s = LoaderSeconds(epoch) + wait_ns / readers / 1e9;
  // The union of the waits: AnyWaiting's share of the epoch, scaled so that the measured
  // epoch gives back its measured stall. Not their sum scaled: at 7/8 of the dataset
  // that predicted 44% too little stall for 8 readers that hash each file 10 times.
  const double wall_s = epoch.delta.at_ns / 1e9;
  const double measured = AnyWaiting(measured_wait / 1e9, wall_s, readers);
  const double scale = measured > 0 ? epoch.delta.stalled_ns / 1e9 / (wall_s * measured) : 1.0;
  p.stall_s = p.epoch_s * AnyWaiting(wait_ns / 1e9, p.epoch_s, readers) * scale;
  p.stall_s = std::min(p.stall_s, p.epoch_s);
  return p;
}

namespace {

// The verdict on the measured epoch and the advice it leads to, from the predictions
// (today's settings first), into `j`.
void Verdict(const AdviceInput& in, const std::vector<Prediction>& predictions, nlohmann::json& j) {
  using namespace advice_stat;
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
    if (predictions.front().StallFraction() < in.target) {
      verdict = kEnough;  // no smaller budget is advice
      chosen = &predictions.front();
    } else if ((chosen = Smallest(memory, in.target, ReplayedPolicy(in), false))) {
      verdict = kMemory;
    } else if ((chosen = Smallest(tier, in.target, ReplayedPolicy(in), true))) {
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
}

}  // namespace

nlohmann::json Advise(const WhatIfShape& shape, const AdviceInput& in) {
  using namespace advice_stat;
  nlohmann::json j{{kTarget, in.target},
                   {kEnded, in.ended},
                   {kMeasured, in.epoch.Json(in.ended)},
                   {kLoaderS, LoaderSeconds(in.epoch)},
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
  const std::vector<WhatIfQuery> queries = Queries(in);
  std::vector<Prediction> predictions;
  for (const WhatIfPoint& point : ReplaySweep(shape, warmup, in.accesses, in.rate, queries)) {
    predictions.push_back(Predict(in.epoch, point));
  }
  // Today's settings come first: the model's match for the measured epoch. Epoch 1 began
  // with nothing cached, so its match has no warm-up; the points are later epochs'.
  j[kModel] = PointJson(predictions.front());
  if (in.epoch.epoch == 1) {
    j[kModel] = PointJson(
        Predict(in.epoch, ReplaySweep(shape, {}, in.accesses, in.rate, {queries[0]}).front()));
  }
  j[kPoints] = nlohmann::json::array();
  for (size_t i = 1; i < predictions.size(); ++i) j[kPoints].push_back(PointJson(predictions[i]));
  for (const MissRatioPoint& m : LruMissRatioCurve(shape, in.accesses, in.rate)) {
    j[kLru].push_back({{kCacheBytes, m.cache_bytes}, {kHitRatio, m.hit_ratio}});
  }
  Verdict(in, predictions, j);
  return j;
}

}  // namespace gpufs
