// Would another budget stop the stall? Sizing advice from the last epoch.
//
// The stall account (stall_account.h) measured the last epoch: its wall time W, the
// union S of the readers' waits (the stall), and for each kind of fetch (whole groups from
// the source, members alone from the source, the disk tier) the bytes it read and the sum
// of the waits of the reads that waited on it. The what-if model (what_if.h) replays the
// epoch's accesses for other budgets and says how many bytes each kind would then read.
// The prediction joins the two, per reader (R: the most readers seen waiting at once):
//
//   waits(B)  = sum over kinds of bytes_k(B) x (wait per byte of kind k, measured)
//   epoch(B)  = (W - waits / R) + waits(B) / R    the loader's own time, plus its waits
//   stall(B)  = epoch(B) x (1 - (1 - waits(B) / (R x epoch(B)))^R) x c
//
// The stall is the union of the waits: each reader waits a share waits(B) / (R x epoch(B))
// of the time and, taken as independent, at least one waits 1 - (1 - share)^R of it; c
// scales that so the measured epoch gives back S. Rare misses rarely overlap, so near the
// dataset's size the stall shrinks slower than the bytes fetched.
//
// At today's budget both give back what was measured. The loader's own time (decode,
// augmentation, the trainer) is what no budget changes. A kind the epoch did not use has
// no measured cost: a group stream is taken to cost no more per byte than a member read,
// and the disk tier no more than a group from the source; such predictions are marked as
// bounds.
//
// The advice is the smallest budget (memory first, then the disk tier) whose predicted
// stall is under the target, or word that storage is not the bottleneck.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/account/stall_account.h"
#include "cache/account/what_if.h"

namespace gpufs {

// The keys of the advice, spelled here once for the control socket and gpufs-stat.
namespace advice_stat {
inline constexpr const char* kVerdict = "verdict";
inline constexpr const char* kFed = "fed";  // stall under the target
// The epoch stalled, but today's settings are predicted under the target for the epochs
// after it (a cold first epoch with a budget that holds the dataset).
inline constexpr const char* kEnough = "keep_settings";
inline constexpr const char* kMemory = "raise_cache";       // a --cache-size does it
inline constexpr const char* kTier = "add_disk_tier";       // a --disk-cache-size does it
inline constexpr const char* kUnreachable = "unreachable";  // nothing on this node does
inline constexpr const char* kNoEpoch = "no_epoch";         // nothing read yet
inline constexpr const char* kText = "text";
inline constexpr const char* kTarget = "target_stall_fraction";
inline constexpr const char* kMeasured = "measured";  // the epoch (stall_account's keys)
inline constexpr const char* kEnded = "ended";        // the epoch ended (else in progress)
inline constexpr const char* kModel = "model";        // the prediction at today's settings
inline constexpr const char* kPoints = "points";      // every budget tried
inline constexpr const char* kLru = "lru_curve";      // LRU's hit ratio by budget
inline constexpr const char* kAdvice = "advice";      // the chosen point (or null)
inline constexpr const char* kSettings = "settings";  // today's policy and sizes
inline constexpr const char* kPolicy = "policy";
inline constexpr const char* kCacheBytes = "cache_bytes";
inline constexpr const char* kTierBytes = "tier_bytes";
inline constexpr const char* kHitRatio = "hit_ratio";
inline constexpr const char* kSourceBytes = "source_bytes";
inline constexpr const char* kTierReadBytes = "tier_bytes_read";
inline constexpr const char* kStallS = "stall_s";
inline constexpr const char* kEpochS = "epoch_s";
inline constexpr const char* kStallFraction = "stall_fraction";
inline constexpr const char* kBound = "bound";       // a cost the epoch did not measure was used
inline constexpr const char* kLoaderS = "loader_s";  // the loader's own time: an epoch fed
inline constexpr const char* kMemoryAvailable = "memory_available_bytes";
inline constexpr const char* kDiskAvailable = "disk_available_bytes";
inline constexpr const char* kDatasetBytes = "dataset_bytes";
inline constexpr const char* kSampleRate = "sample_rate";
inline constexpr const char* kAccesses = "accesses";
}  // namespace advice_stat

struct AdviceInput {
  StallEpoch epoch;  // the last epoch that ended, or the one in progress
  bool ended = false;
  std::vector<uint32_t> accesses;  // its trace (AccessTrace), sampled at `rate`
  double rate = 1.0;
  std::string policy;             // today's
  uint64_t cache_bytes = 0;       // today's pinned budget
  uint64_t tier_bytes = 0;        // today's disk tier room (0: none)
  uint64_t dataset_bytes = 0;     // the groups' spans, all of them
  uint64_t memory_available = 0;  // what --cache-size could take on this node
  uint64_t disk_available = 0;    // what --disk-cache-size could take (0: no disk tier)
  double target = 0.05;           // the stall fraction to get under
};

// The prediction for one point of the model.
struct Prediction {
  WhatIfPoint point;
  double stall_s = 0;
  double epoch_s = 0;
  bool bound = false;  // used a cost the epoch did not measure
  double StallFraction() const { return epoch_s > 0 ? stall_s / epoch_s : 0.0; }
};

// Prices `point` with the costs measured in `epoch`.
Prediction Predict(const StallEpoch& epoch, const WhatIfPoint& point);

// The advice as JSON (keys in advice_stat): the measured epoch, the model at today's
// settings, every point tried, LRU's curve and the chosen point with its words.
nlohmann::json Advise(const WhatIfShape& shape, const AdviceInput& input);

}  // namespace gpufs
