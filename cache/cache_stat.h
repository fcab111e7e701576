// The keys of the group cache's Stats() (the "cache" object of the stats), spelled here
// once for the cache, gpufs-stat and /metrics, and what /metrics exports of them.
#pragma once

#include "cache/cache_options.h"
#include "source/figure.h"

namespace gpufs::cache_stat {

// Reads, by how they were served (CacheCounters says what each counts).
inline constexpr const char* kHits = "hits";
inline constexpr const char* kMisses = "misses";
inline constexpr const char* kSharedWaits = "shared_waits";
inline constexpr const char* kMemberReads = "member_reads";
inline constexpr const char* kBytesFromSource = "bytes_from_source";  // from the source, all told
inline constexpr const char* kMemberBytesFromSource = "member_bytes_from_source";
inline constexpr const char* kBytesServed = "bytes_served";
inline constexpr const char* kGroupsLoaded = "groups_loaded";
inline constexpr const char* kEvictions = "evictions";
inline constexpr const char* kPrefetchIssued = "prefetch_issued";
inline constexpr const char* kPrefetchUsed = "prefetch_used";
inline constexpr const char* kPrefetchWasted = "prefetch_wasted";
inline constexpr const char* kIoErrors = "io_errors";
inline constexpr const char* kDemandReads = "demand_reads";
// The state of the cache and its arena now.
inline constexpr const char* kPrefetchInFlight = "prefetch_in_flight";
inline constexpr const char* kPrefetchWindow = "prefetch_window";
inline constexpr const char* kEpoch = "epoch";  // the stall account's
inline constexpr const char* kEpochFilesServed = "epoch_files_served";
inline constexpr const char* kPolicy = "policy";
inline constexpr const char* kBudget = "budget_bytes";
inline constexpr const char* kCachedBytes = "cached_bytes";
inline constexpr const char* kCachedGroups = "cached_groups";
inline constexpr const char* kGroups = "groups";
inline constexpr const char* kArenaLocked = "arena_locked";
inline constexpr const char* kArenaPrefaulted = "arena_prefaulted_bytes";
inline constexpr const char* kArenaTaken = "arena_taken_bytes";
inline constexpr const char* kHugePages = "huge_pages";
inline constexpr const char* kReadAmplification = "read_amplification";
inline constexpr const char* kTier = "tier";  // the disk tier's (tier_stat), when there is one

// The cache's counters (CacheCounters): its Stats() and, those with a metric, /metrics.
inline constexpr CounterFigure<CacheCounters> kCounterFigures[] = {
    {{kHits, "cache_hits_total", kCounter, "Reads served from a cached group."},
     &CountOf<&CacheCounters::hits>},
    {{kMisses, "cache_misses_total", kCounter, "Reads that loaded their group."},
     &CountOf<&CacheCounters::misses>},
    {{kSharedWaits, "cache_shared_waits_total", kCounter,
      "Reads that waited for a load already in flight."},
     &CountOf<&CacheCounters::shared_waits>},
    {{kMemberReads, "cache_member_reads_total", kCounter,
      "Reads served by reading their file alone."},
     &CountOf<&CacheCounters::member_reads>},
    {{kGroupsLoaded, "cache_groups_loaded_total", kCounter, "Groups loaded into the cache."},
     &CountOf<&CacheCounters::groups_loaded>},
    {{kEvictions, "cache_evictions_total", kCounter, "Groups evicted from the cache."},
     &CountOf<&CacheCounters::evictions>},
    {{kPrefetchIssued, "cache_prefetch_issued_total", kCounter, "Group loads started ahead."},
     &CountOf<&CacheCounters::prefetch_issued>},
    {{kPrefetchUsed, "cache_prefetch_used_total", kCounter,
      "Prefetched groups read before they were evicted."},
     &CountOf<&CacheCounters::prefetch_used>},
    {{kPrefetchWasted, "cache_prefetch_wasted_total", kCounter,
      "Prefetched groups evicted unread."},
     &CountOf<&CacheCounters::prefetch_wasted>},
    {{kIoErrors, "cache_io_errors_total", kCounter, "Reads the cache failed with EIO."},
     &CountOf<&CacheCounters::io_errors>},
    {{kDemandReads, "cache_demand_reads_total", kCounter,
      "Requests sent for a waiting reader, ahead of prefetch."},
     &CountOf<&CacheCounters::demand_reads>},
    {{kBytesFromSource, "cache_source_bytes_total", kCounter, "Bytes read from the blobs."},
     &CountOf<&CacheCounters::bytes_from_source>},
    {{kMemberBytesFromSource}, &CountOf<&CacheCounters::member_bytes_from_source>},
    {{kBytesServed}, &CountOf<&CacheCounters::bytes_served>}};
// The gauges that /metrics exports.
inline constexpr Figure kFigures[] = {
    {kBudget, "cache_budget_bytes", kGauge, "Pinned cache budget."},
    {kCachedBytes, "cache_bytes", kGauge, "Pinned cache bytes in use."},
    {kCachedGroups, "cache_groups", kGauge, "Groups held in the pinned cache."},
    {kPrefetchInFlight, "cache_prefetch_in_flight", kGauge, "Prefetch loads in flight."},
    {kPrefetchWindow, "cache_prefetch_window", kGauge,
     "Prefetch reads the source may have in flight, shrunk while demand reads wait behind "
     "them."},
    {kReadAmplification, "cache_read_amplification", kGauge, "Disk bytes per byte served."},
    {kEpoch, "epoch", kGauge, "Training epoch detected from the access stream."},
    {kEpochFilesServed, "epoch_served_files", kGauge, "Files served in the current epoch."}};

}  // namespace gpufs::cache_stat
