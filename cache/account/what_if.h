// What would another budget have done? A model of the group cache replayed over one
// epoch's accesses, for `gpufs-stat --advise`.
//
// The daemon records which file each read to its end was (AccessTrace). At ImageNet-21k
// scale an epoch is 14 M accesses, so the trace keeps a spatial sample of groups
// (SHARDS: a group is kept when a hash of its id falls under the rate, every access of a
// kept group is kept, and budgets are scaled by the same rate), which bounds the trace to
// a few MB while keeping each kept group's accesses exact.
//
// Two models read the trace:
//   - LRU's miss-ratio curve in one pass (Mattson's stack distances, in bytes of groups):
//     a group's access hits a cache of B bytes when the groups touched since its last
//     access, itself included, fit in B.
//   - An exact replay for any policy (consume-once, pin, lru): the policy objects the
//     cache uses (policy.h), driven by the same rules as GroupCache::Read: a group is
//     loaded whole when the policy wants it and room can be made, else its member is read
//     alone; a disk tier keeps each group it is handed while it has room (a full tier keeps
//     its copies) and serves the misses it holds. A warm-up epoch runs first, so the
//     measured epoch starts from the state a previous epoch left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace gpufs {

// What the model needs of the dataset: each file's group and size, and the room each
// group takes in the pinned arena (its aligned span). Indexed by file index and group id.
struct WhatIfShape {
  std::vector<uint32_t> file_group;
  std::vector<uint64_t> file_bytes;
  std::vector<uint64_t> group_bytes;
};

// One epoch's accesses (file indexes, in the order they were read to their end) of a
// sample of groups. Thread-safe.
class AccessTrace {
 public:
  // Keeps all groups while an epoch of `files` accesses fits in `max_entries`; otherwise a
  // sample of groups of rate 7/8 of max_entries / files (headroom for the sample's size,
  // which varies; the accesses past max_entries in an epoch are dropped and counted).
  AccessTrace(size_t files, size_t groups, size_t max_entries = size_t{1} << 18);
  double rate() const { return rate_; }
  bool Sampled(uint32_t group) const;
  // File `file` of `group` was read to its end. Cheap (no lock) when the group is not kept.
  void Record(uint32_t file, uint32_t group);
  // The epoch in progress ends: its accesses become Last(), and a new one begins.
  void NextEpoch();
  std::vector<uint32_t> Last() const;     // the finished epoch's accesses (empty: none yet)
  std::vector<uint32_t> Current() const;  // the epoch in progress so far
  // Bytes the trace holds now (for the stats: it must stay a few MB).
  size_t memory_bytes() const;
  // Accesses of kept groups left out because the epoch already held max_entries (a sample
  // that overshot its rate), over the trace's life.
  uint64_t dropped() const;

 private:
  double rate_ = 1.0;
  uint64_t threshold_ = 0;  // a group is kept when its hash is below this
  size_t max_entries_;
  mutable std::mutex mu_;
  std::vector<uint32_t> current_;  // guarded by mu_
  std::vector<uint32_t> last_;     // guarded by mu_
  uint64_t dropped_ = 0;           // guarded by mu_
};

// Where one epoch's reads would be served from, for one policy and one pair of sizes. Counts
// and bytes are scaled back to the whole dataset (divided by the trace's rate).
struct WhatIfPoint {
  std::string policy;
  uint64_t cache_bytes = 0;   // the pinned budget
  uint64_t tier_bytes = 0;    // the disk tier's size (0: no tier)
  uint64_t reads = 0;         // files read in the epoch
  uint64_t memory_hits = 0;   // reads of a group already in memory
  uint64_t tier_reads = 0;    // reads that missed memory and were served from the tier
  uint64_t source_reads = 0;  // reads that fetched from the source (group load or member)
  uint64_t bytes_served = 0;
  uint64_t bytes_from_tier = 0;
  uint64_t bytes_from_source = 0;
  // Of which members read alone: each pays the source's latency, where a group streams.
  uint64_t member_bytes_from_source = 0;
  // Of bytes_served, what the source sent for the epoch: reads that went to the source, and
  // reads of groups it fetched whole in the epoch (the stall account's misses).
  uint64_t miss_bytes = 0;
  // The share of bytes served that are not misses, as the stall account measures it; none
  // when nothing was served.
  std::optional<double> HitRatio() const;
};

// LRU over whole groups: the memory hit ratio (reads) at each budget where it changes, as
// (budget in bytes, hit ratio) pairs sorted by budget; budgets scaled to the dataset.
struct MissRatioPoint {
  uint64_t cache_bytes = 0;
  double hit_ratio = 0;
};
std::vector<MissRatioPoint> LruMissRatioCurve(const WhatIfShape& shape,
                                              const std::vector<uint32_t>& accesses, double rate);

// Replays `warmup` then `measured` (file indexes of the trace, sampled at `rate`) for
// `policy` ("consume-once", "pin" or "lru") with the given sizes (whole-dataset bytes;
// scaled by `rate` inside) and reports the measured epoch.
WhatIfPoint Replay(const WhatIfShape& shape, const std::vector<uint32_t>& warmup,
                   const std::vector<uint32_t>& measured, double rate, const std::string& policy,
                   uint64_t cache_bytes, uint64_t tier_bytes);

// One point of a sweep: a policy and a pair of whole-dataset sizes.
struct WhatIfQuery {
  std::string policy;
  uint64_t cache_bytes = 0;
  uint64_t tier_bytes = 0;
};
// Replay for each query, in order, over the same trace: the trace is renumbered once, so a
// sweep costs its replays alone (see Replay; an unknown policy gives a point of zeros).
std::vector<WhatIfPoint> ReplaySweep(const WhatIfShape& shape, const std::vector<uint32_t>& warmup,
                                     const std::vector<uint32_t>& measured, double rate,
                                     const std::vector<WhatIfQuery>& queries);

}  // namespace gpufs
