// What the group cache is asked to do (CacheOptions) and what it counts (CacheCounters),
// shared by the cache and its tier side (cache_tier.h).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cache/account/striped_counter.h"
#include "cache/policy/policy.h"
#include "source/member_digests.h"

namespace gpufs {

struct CacheOptions {
  std::string policy{policy_name::kConsumeOnce};
  unsigned prefetch_depth = 8;  // groups prefetched at once; 0: no prefetch
  size_t io_piece = 0;          // bytes per prefetch read of a group load; 0: the whole group
  // Bytes per block of a load's grid: what a waiting reader's own request rounds to. 0:
  // io_piece. io_piece is a multiple of it.
  size_t demand_block = 0;
  unsigned reads_in_flight = 4;  // requests of group loads in flight at once, demand included
  // The window of prefetch reads starts small and follows what demand reads cost
  // (group_loads.cc); false: it is reads_in_flight throughout.
  bool adapt_window = true;
  bool verify = false;  // check each member's checksum on its first read
  // False: a read that misses serves its member alone and no group is loaded, prefetched
  // or fetched to the disk tier (a node of a sharded job that cannot keep the dataset).
  bool whole_groups = true;
  // What disk tier copies are checked against (the source's, shared); null: made from the
  // catalog when it has SHA-256 digests.
  std::shared_ptr<const MemberDigests> digests = nullptr;
  // How a file whose group is not pinned is read (cache/miss_reads.h): auto, groups,
  // members; and the memory the kernel may cache beside the budget, for auto's choice.
  std::string miss_reads{"auto"};
  uint64_t page_cache_bytes = 0;
  // Bytes of groups being staged into the disk tier at once (tier_staging.h); 0: a
  // quarter of the budget, within 128-256 MiB.
  size_t staging_budget = 0;
};

// Those bumped on every read are striped per thread (a read of one sums its stripes); the
// rest change under mu_ or once a load.
struct CacheCounters {
  StripedCounter hits;                                // reads served from a cached group
  std::atomic<uint64_t> misses{0};                    // reads that loaded their group
  std::atomic<uint64_t> shared_waits{0};              // reads that waited for a load in flight
  StripedCounter member_reads;                        // reads served by reading just the member
  std::atomic<uint64_t> bytes_from_source{0};         // from the source: loads, staging, members
  std::atomic<uint64_t> member_bytes_from_source{0};  // of which members read alone
  StripedCounter bytes_served;
  std::atomic<uint64_t> groups_loaded{0};
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> prefetch_issued{0};
  StripedCounter prefetch_used;
  std::atomic<uint64_t> prefetch_wasted{0};
  std::atomic<uint64_t> io_errors{0};
  std::atomic<uint64_t> demand_reads{0};  // requests sent for a waiting reader, ahead of prefetch
};

}  // namespace gpufs
