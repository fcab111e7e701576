// The keys of the disk tier's Stats() (the "tier" object of the cache's), spelled here once
// for the tier, the cache, gpufs-stat and /metrics, and what /metrics exports of them.
#pragma once

#include <atomic>
#include <cstdint>

#include "source/figure.h"

namespace gpufs {

// The keys of the tier's Stats(), spelled here once for the stats, gpufs-stat and /metrics.
namespace tier_stat {
inline constexpr const char* kRoot = "root";
inline constexpr const char* kBound = "bound_bytes";         // the size bound (all daemons)
inline constexpr const char* kKeepFree = "keep_free_bytes";  // left free on the disk
inline constexpr const char* kUsed = "used_bytes";           // in use under ROOT (all daemons)
inline constexpr const char* kHits = "hits";                 // groups read back whole
inline constexpr const char* kSliceHits = "slice_hits";      // members read back alone
inline constexpr const char* kMisses = "misses";             // reads that found no copy
inline constexpr const char* kDamaged = "damaged";           // copies deleted as damaged
// Copies deleted because their bytes did not match the index's SHA-256 (planted or stale).
inline constexpr const char* kHashMismatches = "hash_mismatches";
inline constexpr const char* kReadBytes = "read_bytes";
inline constexpr const char* kWrites = "writes";  // groups kept
inline constexpr const char* kWriteBytes = "write_bytes";
inline constexpr const char* kSkipped = "write_skipped";  // not kept: no room
inline constexpr const char* kWriteErrors = "write_errors";
inline constexpr const char* kEvictions = "evictions";  // files this daemon deleted for room
inline constexpr const char* kEnabled = "enabled";
inline constexpr const char* kFills = "fills";  // groups fetched for the tier alone (the cache's)
inline constexpr const char* kStaging = "staging";  // the stager's own (tier_staging.h)

// What the tier counts, each under the key of its row below.
struct Counters {
  std::atomic<uint64_t> hits{0}, slice_hits{0}, misses{0}, damaged{0}, read_bytes{0};
  std::atomic<uint64_t> hash_mismatches{0};
  std::atomic<uint64_t> writes{0}, write_bytes{0}, skipped{0}, write_errors{0}, evictions{0};
};

// The tier's counters: its Stats() and /metrics.
inline constexpr CounterFigure<Counters> kCounterFigures[] = {
    {{kHits, "disk_tier_hits_total", kCounter, "Groups read back whole from the disk tier."},
     &CountOf<&Counters::hits>},
    {{kSliceHits, "disk_tier_slice_hits_total", kCounter,
      "Files read back alone from the disk tier."},
     &CountOf<&Counters::slice_hits>},
    {{kMisses, "disk_tier_misses_total", kCounter, "Disk tier reads that found no copy."},
     &CountOf<&Counters::misses>},
    {{kDamaged, "disk_tier_damaged_total", kCounter, "Disk tier copies found damaged and deleted."},
     &CountOf<&Counters::damaged>},
    {{kHashMismatches, "disk_tier_hash_mismatches_total", kCounter,
      "Disk tier copies deleted because they did not match the index's SHA-256."},
     &CountOf<&Counters::hash_mismatches>},
    {{kReadBytes, "disk_tier_read_bytes_total", kCounter, "Bytes read from the disk tier."},
     &CountOf<&Counters::read_bytes>},
    {{kWrites, "disk_tier_writes_total", kCounter, "Groups written to the disk tier."},
     &CountOf<&Counters::writes>},
    {{kWriteBytes, "disk_tier_write_bytes_total", kCounter, "Bytes written to the disk tier."},
     &CountOf<&Counters::write_bytes>},
    {{kSkipped, "disk_tier_write_skipped_total", kCounter,
      "Groups not kept on disk for want of room."},
     &CountOf<&Counters::skipped>},
    {{kWriteErrors, "disk_tier_write_errors_total", kCounter, "Disk tier writes that failed."},
     &CountOf<&Counters::write_errors>},
    {{kEvictions, "disk_tier_evictions_total", kCounter, "Disk tier copies deleted to make room."},
     &CountOf<&Counters::evictions>}};
// The rest that /metrics exports: the cache's fills, and the folder's gauges.
inline constexpr Figure kFigures[] = {
    {kFills, "disk_tier_fills_total", kCounter, "Groups fetched to the disk tier alone."},
    {kUsed, "disk_tier_used_bytes", kGauge,
     "Bytes in the disk tier folder, all daemons sharing it."},
    {kBound, "disk_tier_bound_bytes", kGauge,
     "Bound on the disk tier folder; 0: bounded by free space."}};
}  // namespace tier_stat

}  // namespace gpufs
