// The group cache: the reason to group at all. A trainer asks for one image; the cache
// reads the image's whole group in one large read into pinned memory and serves its
// siblings from there when they are asked for, later in the epoch.
//
// - Single flight: readers of a group that is being loaded wait for that one read.
// - Budget: groups live in a PinnedArena of fixed size; an EvictionPolicy picks what goes.
// - Never worse than ungrouped: when a group cannot be admitted (everything cached is in
//   use, or the policy keeps what it has), just the member is read, as without groups.
// - No double caching: blobs are read with O_DIRECT where the filesystem allows, else
//   the blob's pages are dropped from the kernel cache (fadvise) right after the read;
//   what stays cached in the kernel is the served files themselves.
// - Prefetch: once reads have begun, while no reader waits on a load and the budget has
//   room, the next groups the policy still wants are loaded in the background, several
//   at once (one stream of reads leaves a throttled volume half idle).
// - Failures are answers: a load that fails (a blob changed, truncated, unreadable) fails
//   every reader that waited on it with the same error; the group is then skipped by
//   prefetch until a reader's own load of it succeeds, so a bad blob costs each reader one
//   attempt and never a loop. A whole-blob group is checked against the blob's checksum
//   when the index has one. On a mismatch each member is checked against its own checksum
//   in the bytes already loaded: damaged members read as EIO, intact ones are still
//   served; without member checksums the whole group fails. A blob rewritten under the
//   mount is refused, never served.
// - Disk tier (optional, cache/disk_tier.h): a load looks there before the source, and a
//   group loaded from the source is written there in the background (pinned until
//   written). A member read that bypasses the pinned tier is served from the group's
//   copy on disk when there is one; otherwise the group is fetched to disk in the
//   background, so that a budget smaller than the dataset still leaves the next epoch
//   with every group on local disk. Consume-once thus drops a consumed group from RAM
//   first while its copy stays on disk; pin keeps both tiers once full.
// Every decision is counted; Stats() reports the counters.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/arena.h"
#include "cache/cached_bytes.h"
#include "cache/disk_tier.h"
#include "cache/member_reads.h"
#include "cache/policy.h"
#include "dataset/catalog.h"
#include "dataset/error.h"
#include "source/blob_source.h"

namespace gpufs {

struct CacheOptions {
  std::string policy = "consume-once";
  unsigned prefetch_depth = 8;  // groups prefetched at once; 0: no prefetch
  size_t io_piece = 0;          // largest single read; 0: the source's part size
  bool verify = false;          // check each member's checksum on its first read
  // False: a read that misses serves its member alone and no group is loaded, prefetched
  // or fetched to the disk tier (a node of a sharded job that cannot keep the dataset).
  bool whole_groups = true;
};

struct CacheCounters {
  std::atomic<uint64_t> hits{0};          // reads served from a cached group
  std::atomic<uint64_t> misses{0};        // reads that loaded their group
  std::atomic<uint64_t> shared_waits{0};  // reads that waited for a load in flight
  std::atomic<uint64_t> member_reads{0};  // reads served by reading just the member
  std::atomic<uint64_t> bytes_from_disk{0};
  std::atomic<uint64_t> bytes_served{0};
  std::atomic<uint64_t> groups_loaded{0};
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> prefetch_issued{0};
  std::atomic<uint64_t> prefetch_used{0};
  std::atomic<uint64_t> prefetch_wasted{0};
  std::atomic<uint64_t> io_errors{0};
  std::atomic<uint64_t> tier_fills{0};  // groups fetched for the disk tier alone
};

class GroupCache {
 public:
  // All references, and `tier` when given, must outlive the cache. Thread-safe.
  GroupCache(const Catalog& catalog, BlobSource& source, PinnedArena& arena,
             std::unique_ptr<EvictionPolicy> policy, CacheOptions options,
             DiskTier* tier = nullptr);
  ~GroupCache();

  // Up to `size` bytes of file node `file` at `offset` (clamped to its end).
  Result<CachedBytes> Read(NodeId file, uint64_t offset, size_t size);

  bool Resident(uint32_t group) const;
  // Which groups are cached, all at one instant. Thread-safe.
  std::vector<bool> ResidentGroups() const;
  // Which groups have a copy on the disk tier now (none without a tier). Thread-safe.
  std::vector<bool> TierGroups() const;
  bool has_tier() const { return tier_ != nullptr; }
  // The counters, the fill and the policy's epoch, as gpufs-stat and the metrics read them.
  nlohmann::json Stats() const;
  const CacheCounters& counters() const { return counters_; }

 private:
  friend class CachedBytes;
  struct Entry {
    bool ready = false;
    size_t arena_offset = 0;
    size_t arena_bytes = 0;
    uint64_t data_start = 0;  // blob offset of the first byte held
    uint32_t pins = 0;
    bool prefetched = false;
    bool used = false;
    bool failed = false;     // the load failed with `error`; the entry is already dropped
    bool from_tier = false;  // loaded from the disk tier, so not written back to it
    Error error;
    std::vector<uint32_t> damaged;  // file indices whose checksum failed, sorted
  };

  Result<CachedBytes> ServeHit(uint32_t group, NodeId file, uint64_t offset, size_t size);
  Status VerifyHit(NodeId file, const CachedBytes& bytes, uint64_t offset);
  Result<CachedBytes> ReadMember(NodeId file, uint64_t offset, size_t size);
  Status Load(uint32_t group, Entry& entry, std::unique_lock<std::mutex>& lock);
  Status ReadGroup(uint32_t group, Entry& entry);
  Status CheckWholeBlob(uint32_t group, const char* bytes, Entry& entry) const;
  Entry* Admit(uint32_t group, bool may_evict);
  void Evict(uint32_t group);
  void Unpin(uint32_t group);
  size_t SpanOf(uint32_t group, uint64_t* start) const;
  void Prefetch();
  // The disk tier's side (group_cache_tier.cc).
  struct TierJob {
    uint32_t group = 0;
    bool write_back = false;  // the group's loaded bytes, pinned; else fetch it first
  };
  std::optional<Result<CachedBytes>> ReadMemberFromTier(NodeId file, uint64_t offset, size_t size);
  void QueueTierJob(uint32_t group, bool write_back);
  void TierLoop();
  void FillTier(uint32_t group);
  bool IntactGroup(uint32_t group, const char* bytes) const;

  const Catalog& catalog_;
  BlobSource& source_;
  PinnedArena& arena_;
  const CacheOptions options_;
  CacheCounters counters_;
  std::unique_ptr<MemberChecks> checks_;  // with options_.verify

  // Lock order: mu_ only; the arena's own lock is taken inside it, never the reverse.
  mutable std::mutex mu_;
  std::condition_variable changed_;         // a load finished or room was made
  std::unique_ptr<EvictionPolicy> policy_;  // guarded by mu_
  // By group; shared with the readers waiting on a load, who read its outcome after the
  // entry has left the table. Guarded by mu_.
  std::vector<std::shared_ptr<Entry>> entries_;
  std::vector<bool> failed_;      // the last load of the group failed; guarded by mu_
  std::vector<bool> busy_;        // pinned or loading; guarded by mu_
  unsigned demand_loads_ = 0;     // guarded by mu_
  unsigned prefetch_loads_ = 0;   // in flight; guarded by mu_
  uint32_t prefetch_cursor_ = 0;  // guarded by mu_
  bool stop_ = false;             // guarded by mu_
  bool reading_ = false;  // a read has arrived; prefetch follows the access stream; guarded by mu_
  std::vector<std::thread> prefetchers_;

  // Disk writes and fills at once: two keep a local disk busy while the source answers.
  static constexpr unsigned kTierWorkers = 2;
  DiskTier* const tier_;
  std::vector<std::string> tier_names_;  // by group; empty: not kept on disk
  std::condition_variable tier_wake_;    // a tier job was queued, or stop_
  std::deque<TierJob> tier_jobs_;        // guarded by mu_
  std::vector<bool> tier_queued_;        // a job for the group is queued or running; guarded by mu_
  std::vector<std::thread> tier_workers_;
};

}  // namespace gpufs
