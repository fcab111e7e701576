// The group cache's side of the disk tier (see group_cache.h): the name of each group's
// copy, what copies read back are checked against, members served from a copy or from a
// staging, and the stager that fills the tier with the groups the pinned tier has no room
// for. The write-backs of groups loaded into the pinned tier stay with the cache, which
// holds them pinned until written.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cache/account/stall_account.h"
#include "cache/cache_options.h"
#include "cache/cached_bytes.h"
#include "cache/lower_tier.h"
#include "cache/member_reads.h"
#include "cache/tier/disk_tier.h"
#include "cache/tier_staging.h"
#include "dataset/catalog.h"
#include "source/blob_source.h"
#include "source/member_digests.h"

namespace gpufs {

// The aligned byte range of the blob that a load of `group` reads; returns its length.
size_t GroupSpan(const Catalog& catalog, const BlobSource& source, uint32_t group, uint64_t* start);

class CacheTier : public LowerTier {
 public:
  // All references, `checks` when given, must outlive the tier side. `intact` says whether
  // a group's bytes are the dataset's (the whole-blob checksum); staging keeps only those.
  // `arena_bytes` sizes the staging budget when the options leave it. Thread-safe.
  CacheTier(const Catalog& catalog, BlobSource& source, DiskTier& tier, const CacheOptions& options,
            size_t arena_bytes, MemberChecks* checks, CacheCounters& counters,
            TierStager::Check intact);
  // Stops the write-backs, then the stager: its reads in flight call back into it and
  // count into counters.
  ~CacheTier() override;
  CacheTier(const CacheTier&) = delete;
  CacheTier& operator=(const CacheTier&) = delete;

  // The member from its group's copy on disk, checked; or, while its group is being staged
  // into the tier, from the staging buffer (its blocks sent first). nullopt when neither
  // has it (the caller reads the member from the source). A miss stages the group, so
  // that the next epoch finds it on disk. `from` says which served it.
  std::optional<Result<CachedBytes>> ReadMember(NodeId file, uint64_t offset, size_t size,
                                                ServedFrom* from) override;
  // The whole copy of `group` (`length` bytes of its span) into `target`, checked against
  // the digests where the index has them (`group_bytes`: where the group's own bytes start
  // in `target`). False when there is no good copy (a bad one is deleted).
  bool ReadGroup(uint32_t group, char* target, size_t length, const char* group_bytes) override;
  // At most kMaxWriteBacks wait at once, each holding its group pinned; more are dropped.
  bool WriteBack(uint32_t group, const char* bytes, size_t length,
                 std::function<void()> written) override;
  void StopWrites() override;
  // False for a group whose copy has no name (nothing is known of its blob: never kept).
  bool Keeps(uint32_t group) const { return !names_[group].empty(); }
  // Whether `group` is being fetched into the tier: its readers are served from there, and
  // it is not loaded into the pinned tier meanwhile (never fetched twice).
  bool Staging(uint32_t group) const override { return stager_->Staging(group); }
  // Which groups have a copy on disk now.
  std::vector<bool> Groups() const override;
  // The tier's stats with the stager's (tier_stat::kStaging) and its fills.
  nlohmann::json Stats() const override;
  uint64_t read_bytes() const override { return tier_.read_bytes(); }
  uint64_t Room() const override { return tier_.Room(); }
  uint64_t OnDisk() const override { return tier_.OnDisk(); }

  static constexpr size_t kMaxWriteBacks = 16;

 private:
  struct WriteJob {
    uint32_t group = 0;
    const char* bytes = nullptr;
    size_t length = 0;
    std::function<void()> written;
  };
  void WriterLoop();
  // Whether the copy's `length` bytes of `group` at blob offset `offset` match the digests
  // of the members in it; a copy that does not is deleted.
  bool Trusted(uint32_t group, uint64_t offset, const char* bytes, size_t length);
  void StartStager(const CacheOptions& options, size_t arena_bytes, TierStager::Check intact);

  const Catalog& catalog_;
  BlobSource& source_;
  DiskTier& tier_;
  const bool whole_groups_;
  MemberChecks* const checks_;
  CacheCounters& counters_;
  std::vector<std::string> names_;  // by group; empty: not kept on disk
  // What copies read back are checked against; null when the index has no digests.
  std::shared_ptr<const MemberDigests> digests_;
  // Members read alone whose bytes in their copy matched their digests, one bit each: such
  // a member is hashed whole on its first read from a copy, not on every read of a piece
  // of it (its copy's block sums are still checked). Set once, never cleared.
  std::unique_ptr<std::atomic<uint64_t>[]> hashed_;
  std::unique_ptr<TierStager> stager_;

  // The write-backs, guarded by write_mu_ (taken alone: a job's `written` runs outside it).
  std::mutex write_mu_;
  std::condition_variable write_wake_;  // a job was queued, or writes_stop_
  std::deque<WriteJob> write_jobs_;
  std::vector<bool> write_queued_;  // by group: queued or being written
  bool writes_stop_ = false;
  // Two keep a local disk busy. Last: they use all of the above.
  std::vector<std::thread> writers_;
};

}  // namespace gpufs
