// The group cache: the reason to group at all. A trainer asks for one image; the cache
// reads the image's whole group, in large pieces, into pinned memory and serves its
// siblings from there when they are asked for, later in the epoch.
//
// - Single flight: readers of a group that is being loaded wait for that one read.
// - Budget: groups live in a PinnedArena of fixed size; an EvictionPolicy picks what goes.
// - Never worse than ungrouped: a member whose group cannot be admitted (all cached is in
//   use, or the policy keeps what it has) is read with its group through the kernel's
//   page cache, or alone (cache/miss_reads.h weighs which).
// - No double caching: blobs are read with O_DIRECT where the filesystem allows, else
//   the blob's pages are dropped from the kernel cache (fadvise) right after the read;
//   what stays cached in the kernel is the served files themselves.
// - Blocks and the demand lane (group_loads.cc; the reads are scheduled by
//   cache/load/group_loader.h, as the tier stager's are): a load from the source is a grid of
//   blocks (demand_block: the smallest read that costs the source no more than a smaller
//   one). Prefetch reads runs of queued blocks up to io_piece long, a bounded number in
//   flight (reads_in_flight), in the order the groups were admitted. A reader that waits
//   on a member whose blocks are still queued sends them at once as a request of their
//   own, marked urgent so the source puts it ahead of what it has queued; it never waits
//   for the prefetch window to drain, and joins a request already in flight instead of
//   repeating it. A member is served as soon as its blocks have landed (checked against
//   its own checksum where the group's would have covered it), so the trainer consumes
//   while the volume is still reading; the group keeps filling behind it. The window
//   adapts: where demand reads wait behind it (a source with one queue) it shrinks, and
//   it grows while they do not.
// - A failed read of part of a group fails the readers of those bytes only; the group is
//   dropped once nothing of it is left to read and nobody waits on it.
// - Prefetch: once reads have begun, while the budget has room, the next groups the
//   policy still wants are queued behind the demanded ones, several at once, so the
//   volume is never idle while there is something left to read.
// - Failures are answers: a load that fails (a blob changed, truncated, unreadable) fails
//   every reader that waited on it with the same error; the group is then skipped by
//   prefetch until a reader's own load of it succeeds, so a bad blob costs each reader one
//   attempt and never a loop. A whole-blob group is checked against the blob's checksum
//   when the index has one. On a mismatch each member is checked against its own checksum
//   in the bytes already loaded: damaged members read as EIO, intact ones are still
//   served; without member checksums the whole group fails. A blob rewritten under the
//   mount is refused, never served.
// - Disk tier (optional, cache/tier/disk_tier.h): a load looks there before the source, and a
//   group loaded from the source is written there in the background (pinned until
//   written). A member read that bypasses the pinned tier is served from the group's
//   copy on disk when there is one (one read of its checked blocks); otherwise the group
//   is staged (cache/tier_staging.h): fetched whole through the source's asynchronous
//   path, within a budget of bytes in flight, into the tier, while the reader is served
//   from the staging as soon as its own blocks land (sent first, urgent). So a budget
//   smaller than the dataset still reads it at the link's speed and leaves the next
//   epoch with every group on local disk, as far as the tier has room; a full tier keeps
//   what it has and the rest is read member by member. Consume-once thus drops a
//   consumed group from RAM first while its copy stays on disk; pin keeps both tiers once
//   full. The tier's own
//   block checksums catch damage only (anyone who can write the folder can recompute
//   them): where the index has SHA-256 digests, a copy read back is checked against the
//   digests of its members before it is served, once per fill of the pinned tier (a
//   member read from disk alone, each time), and a copy that does not match is deleted,
//   counted and read from the source.
// - The hot path: a read of a group that is ready takes no lock the whole cache shares. It
//   pins the group in the group's own slot (an atomic pin count beside an "open" bit that
//   eviction clears, under mu_, only while the count is 0), the policy hears of it under
//   its own small lock, and the counters it bumps are striped per thread. Readers of a
//   load in flight wait on their entry's own condition, so a landing block wakes only
//   them.
// Every decision is counted; Stats() reports the counters.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cache/account/stall_account.h"
#include "cache/account/striped_counter.h"
#include "cache/account/what_if.h"
#include "cache/arena.h"
#include "cache/cache_options.h"
#include "cache/cached_bytes.h"
#include "cache/load/group_loader.h"
#include "cache/lower_tier.h"
#include "cache/member_reads.h"
#include "cache/miss_reads.h"
#include "cache/policy/policy.h"
#include "cache/tier/disk_tier.h"
#include "cache/tier_staging.h"
#include "dataset/catalog.h"
#include "source/blob_source.h"
#include "source/member_digests.h"

namespace gpufs {

class GroupCache : public MemberReader, private PinHolder {
 public:
  // All references, and `tier` when given, must outlive the cache. Thread-safe.
  GroupCache(const Catalog& catalog, BlobSource& source, PinnedArena& arena,
             std::unique_ptr<EvictionPolicy> policy, CacheOptions options,
             DiskTier* tier = nullptr);
  ~GroupCache();

  // Up to `size` bytes of file node `file` at `offset` (clamped to its end).
  Result<CachedBytes> Read(NodeId file, uint64_t offset, size_t size) override;

  bool Resident(uint32_t group) const;
  // Which groups are cached, all at one instant. Thread-safe.
  std::vector<bool> ResidentGroups() const;
  // Which groups have a copy on the disk tier now (none without a tier). Thread-safe.
  std::vector<bool> TierGroups() const;
  bool has_tier() const { return tier_ != nullptr; }
  // The counters, the fill and the policy's epoch, as gpufs-stat and the metrics read them.
  nlohmann::json Stats() const;
  const CacheCounters& counters() const { return counters_; }
  // Sizing advice from the last epoch's stall and accesses (advice.h), given what this
  // node could give a budget: memory free besides the arena, and disk for a tier where
  // the mount has none (with one, its disk's). Takes seconds at ImageNet scale (a few
  // dozen replays of the sampled trace); thread-safe.
  nlohmann::json Advise(uint64_t free_memory, uint64_t disk_available) const;

 private:
  struct Entry {
    uint32_t group = 0;
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
    // A load from the source, by block (no blocks for a load from the disk tier).
    BlockGrid grid;
    uint32_t waiters = 0;  // readers waiting on the load
    // Reads of part of the group that failed, by block: the readers that waited on them
    // get the error; the rest of the group goes on (group_loads.cc, FailBlocks).
    std::map<uint32_t, Error> failed_blocks;
    bool room_freed = false;  // a failed load's room, once nothing writes or reads it
    // Ready and open in its HotSlot; pins taken there are not counted in `pins`.
    bool hot = false;
    // Its readers wait on it: blocks landed or failed, or the load ended.
    std::condition_variable landed;
  };
  using EntryRef = std::shared_ptr<Entry>;
  // A group's pins on the hot path, one slot per group for the cache's lifetime, so that a
  // reader finds it without mu_. While kOpen is set the group is ready and its bytes stay
  // where the slot says; a reader pins by CAS on `state` only while kOpen is set. Under
  // mu_, Finish fills the slot and sets kOpen; Evict clears it by CAS only while no pin is
  // held. The other fields change only while kOpen is clear.
  struct HotSlot {
    static constexpr uint64_t kOpen = uint64_t{1} << 63;
    std::atomic<uint64_t> state{0};  // kOpen | pins
    size_t arena_offset = 0;
    uint64_t data_start = 0;
    std::atomic<bool> unused_prefetch{false};  // prefetched and not yet served
  };

  // A member was read to its end: the policy, the stall account and the access trace.
  void FileDone(uint32_t group, NodeId file);
  void CountServed(StallWait& wait, ServedFrom from, NodeId file, uint64_t offset, size_t size);
  Result<CachedBytes> ReadSlow(NodeId file, uint64_t offset, size_t size);
  Result<CachedBytes> ServeLanded(Entry& entry, NodeId file, uint64_t offset, size_t size,
                                  std::unique_lock<std::mutex>& lock, StallWait& wait,
                                  ServedFrom waited_on);
  std::optional<CachedBytes> ServeHot(NodeId file, uint64_t offset, size_t size);
  void OpenHot(Entry& entry);
  Result<CachedBytes> ServeHit(uint32_t group, NodeId file, uint64_t offset, size_t size);
  Status VerifyHit(NodeId file, const CachedBytes& bytes, uint64_t offset);
  Result<CachedBytes> ReadMember(NodeId file, uint64_t offset, size_t size, ServedFrom* from);
  Status CheckWholeBlob(uint32_t group, const char* bytes, std::vector<uint32_t>* damaged) const;
  // The piece reads of group loads (group_loads.cc).
  void StartLoad(const EntryRef& entry, std::unique_lock<std::mutex>& lock, const NodeId* file);
  bool LoadFromTier(Entry& entry, std::unique_lock<std::mutex>& lock);
  void Pump(std::unique_lock<std::mutex>& lock);
  using Run = BlockRun<Entry>;  // a run of a load's blocks, read as one request
  LoaderOptions LoaderOptionsOf() const;
  void OnRun(const Run& run, bool demand, Result<size_t> got);
  void FailLoad(Entry& entry, Error error);
  void DropLoad(Entry& entry, Error error);
  void FreeFailed(Entry& entry);
  void Finish(Entry& entry, Status status);
  size_t BlockBytes() const;
  std::pair<uint32_t, uint32_t> BlocksOf(const Entry& entry, NodeId file) const;
  bool Servable(const Entry& entry, NodeId file) const;
  const Error* BlockFailed(const Entry& entry, NodeId file) const;
  void FailBlocks(const Run& run, bool requeue, Error error);
  void SettleFailed(Entry& entry);
  void Urge(const EntryRef& entry, NodeId file);
  Status CheckEarlyMember(NodeId file, const CachedBytes& bytes, uint64_t offset);
  bool HasBlobCheck(uint32_t group) const;
  Entry* Admit(uint32_t group, bool may_evict);
  bool Evict(uint32_t group);
  void Unpin(void* hot, void* entry) override;  // PinHolder
  void UnpinEntry(void* entry);
  void UnpinHot(void* slot);
  size_t SpanOf(uint32_t group, uint64_t* start) const;
  void Prefetch();
  // The lower tier's side of the cache (group_cache_tier.cc).
  void WriteBack(Entry& entry);
  // Whether `group` is being fetched into the disk tier: its readers are served from
  // there, and it is not loaded into the pinned tier meanwhile (never fetched twice).
  bool Staging(uint32_t group) const;
  bool IntactGroup(uint32_t group, const char* bytes) const;

  const Catalog& catalog_;
  BlobSource& source_;
  PinnedArena& arena_;
  const CacheOptions options_;
  CacheCounters counters_;
  StallAccount stall_;
  AccessTrace trace_;                     // each epoch's files, read to their end, sampled by group
  std::unique_ptr<MemberChecks> checks_;  // with options_.verify
  MissReads miss_;                        // how a member whose group is not pinned is read

  // Lock order: mu_, then the policy's, the arena's or the lower tier's own lock, never the
  // reverse.
  mutable std::mutex mu_;
  // A load finished or room was made (prefetch waits on it), or the last read landed.
  std::condition_variable changed_;
  std::unique_ptr<EvictionPolicy> policy_;  // a LockedPolicy: guards itself
  std::unique_ptr<HotSlot[]> hot_;          // by group; see HotSlot
  // By group; shared with the readers waiting on a load, who read its outcome after the
  // entry has left the table. Guarded by mu_.
  std::vector<std::shared_ptr<Entry>> entries_;
  std::vector<bool> failed_;     // the last load of the group failed; guarded by mu_
  std::vector<bool> busy_;       // pinned or loading (hot pins: see Evict); guarded by mu_
  unsigned prefetch_loads_ = 0;  // in flight; guarded by mu_
  // Demanded blocks, then loads with blocks queued by admission, within the adapted window
  // (group_loads.cc). Guarded by mu_.
  GroupLoader<Entry> loader_;
  uint32_t prefetch_cursor_ = 0;  // guarded by mu_
  bool stop_ = false;             // guarded by mu_
  bool reading_ = false;  // a read has arrived; prefetch follows the access stream; guarded by mu_
  std::vector<std::thread> prefetchers_;

  std::unique_ptr<LowerTier> tier_;  // with a disk tier; thread-safe itself
};

}  // namespace gpufs
