#include "cache/group_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "cache/cache_tier.h"
#include "dataset/format/checksums.h"

namespace gpufs {
GroupCache::GroupCache(const Catalog& catalog, BlobSource& source, PinnedArena& arena,
                       std::unique_ptr<EvictionPolicy> policy, CacheOptions options, DiskTier* tier)
    : catalog_(catalog),
      source_(source),
      arena_(arena),
      options_(std::move(options)),
      stall_(catalog.file_count(), catalog.group_count(),
             [this] {
               std::array<uint64_t, kServedFromCount> fetched{};
               const uint64_t members = counters_.member_bytes_from_source.load();
               fetched[size_t(ServedFrom::kSourceMember)] = members;
               fetched[size_t(ServedFrom::kSourceGroup)] = counters_.bytes_from_source - members;
               fetched[size_t(ServedFrom::kDiskTier)] = tier_ ? tier_->read_bytes() : 0;
               return fetched;
             }),
      trace_(catalog.file_count(), catalog.group_count()),
      checks_(options_.verify && catalog.has_checksums()
                  ? std::make_unique<MemberChecks>(catalog.file_count())
                  : nullptr),
      miss_(
          catalog, source,
          {options_.whole_groups ? std::string_view(options_.miss_reads) : miss_read_name::kMembers,
           arena.capacity(), options_.page_cache_bytes}),
      policy_(std::make_unique<LockedPolicy>(std::move(policy))),
      hot_(std::make_unique<HotSlot[]>(catalog.group_count())),
      entries_(catalog.group_count()),
      failed_(catalog.group_count(), false),
      busy_(catalog.group_count(), false),
      loader_(LoaderOptionsOf(),
              LoaderCounts{&counters_.demand_reads, &counters_.bytes_from_source},
              [this](const Run& run, bool demand, Result<size_t> got) {
                OnRun(run, demand, std::move(got));
              }) {
  for (unsigned i = 0; i < options_.prefetch_depth; ++i) {
    prefetchers_.emplace_back([this] { Prefetch(); });
  }
  if (!tier) return;
  tier_ = std::make_unique<CacheTier>(
      catalog, source, *tier, options_, arena_.capacity(), checks_.get(), counters_,
      [this](uint32_t group, const char* bytes) { return IntactGroup(group, bytes); });
}

GroupCache::~GroupCache() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : prefetchers_) t.join();
  {  // pieces in flight write into the arena and call back: wait for them all
    std::unique_lock lock(mu_);
    changed_.wait(lock, [this] { return loader_.idle(); });
  }
  // Only now: the last pieces' loads may still have queued write-backs.
  if (tier_) tier_->StopWrites();
  tier_.reset();  // its stager's reads in flight call back into it, and count into counters_
}

// The aligned byte range of the blob a group's load reads; returns its length.
size_t GroupCache::SpanOf(uint32_t group, uint64_t* start) const {
  return GroupSpan(catalog_, source_, group, start);
}

Result<CachedBytes> GroupCache::Read(NodeId file, uint64_t offset, size_t size) {
  const FileExtent& f = catalog_.Extent(file);
  if (offset >= f.size) return CachedBytes{};
  size = static_cast<size_t>(std::min<uint64_t>(size, f.size - offset));
  if (std::optional<CachedBytes> hot = ServeHot(file, offset, size)) {
    if (checks_) {
      if (Status s = VerifyHit(file, *hot, offset); !s) return s.error();
    }
    return std::move(*hot);
  }
  return ReadSlow(file, offset, size);
}

// Under mu_, released before the bytes are checked (the group stays pinned meanwhile): a
// member of a ready group, or one whose blocks have landed before the rest of its group.
Result<CachedBytes> GroupCache::ServeLanded(Entry& entry, NodeId file, uint64_t offset, size_t size,
                                            std::unique_lock<std::mutex>& lock, StallWait& wait,
                                            ServedFrom waited_on) {
  const bool early = !entry.ready;
  auto bytes = ServeHit(entry.group, file, offset, size);
  if (early) SettleFailed(entry);  // once pinned: a group with failed blocks may go
  lock.unlock();
  if (bytes && early) {
    if (Status s = CheckEarlyMember(file, *bytes, offset); !s) return s.error();
  }
  if (bytes && checks_) {
    if (Status s = VerifyHit(file, *bytes, offset); !s) return s.error();
  }
  if (bytes) CountServed(wait, waited_on, file, offset, size);
  return bytes;
}

// Read's way under mu_: a group not open in its hot slot is waited for, loaded, or its
// member read alone; the stall account is told how long the read waited and on what.
Result<CachedBytes> GroupCache::ReadSlow(NodeId file, uint64_t offset, size_t size) {
  const uint32_t group = catalog_.Extent(file).group;
  StallWait wait(stall_);
  ServedFrom waited_on = ServedFrom::kSourceGroup;
  std::unique_lock lock(mu_);
  if (!reading_) {
    reading_ = true;
    changed_.notify_all();  // the prefetcher waits for the first read
  }
  bool counted = false;  // as a miss or a shared wait
  for (;;) {
    const EntryRef entry = entries_[group];
    if (entry && (entry->ready || Servable(*entry, file))) {
      if (!counted) ++counters_.hits;
      return ServeLanded(*entry, file, offset, size, lock, wait, waited_on);
    }
    if (entry) {  // a load is in flight: wait for the member's blocks, or its outcome
      if (!counted) ++counters_.shared_waits;
      counted = true;
      wait.Begin();
      waited_on = entry->from_tier ? ServedFrom::kDiskTier : ServedFrom::kSourceGroup;
      Urge(entry, file);
      Pump(lock);
      ++entry->waiters;
      entry->landed.wait(lock, [&] {
        return entry->ready || entry->failed || Servable(*entry, file) || BlockFailed(*entry, file);
      });
      --entry->waiters;
      if (entry->failed) return entry->error;
      if (const Error* failed = BlockFailed(*entry, file)) {
        Error error = *failed;
        SettleFailed(*entry);
        return error;
      }
      continue;
    }
    const bool wanted = options_.whole_groups && policy_->Wanted(group) && !Staging(group);
    Entry* admitted = wanted ? Admit(group, true) : nullptr;
    wait.Begin();
    if (!admitted) {
      lock.unlock();
      ServedFrom from = ServedFrom::kSourceMember;
      auto bytes = ReadMember(file, offset, size, &from);
      if (bytes) CountServed(wait, from, file, offset, bytes->size());
      return bytes;
    }
    ++counters_.misses;
    counted = true;
    const EntryRef started = entries_[group];
    StartLoad(started, lock, &file);
    waited_on = started->from_tier ? ServedFrom::kDiskTier : ServedFrom::kSourceGroup;
    if (started->failed) return started->error;  // at once (a blob that cannot be opened)
  }
}

// Outside mu_: a read of the slow path is counted where it came from, then (at its
// member's end) as a file done, so the read that ends an epoch is that epoch's.
void GroupCache::CountServed(StallWait& wait, ServedFrom from, NodeId file, uint64_t offset,
                             size_t size) {
  const FileExtent& f = catalog_.Extent(file);
  wait.Served(from, size, f.group);
  if (offset + size >= f.size) FileDone(f.group, file);
}

// A member was read to its end (any caller; takes the policy's and the account's locks).
void GroupCache::FileDone(uint32_t group, NodeId file) {
  const uint32_t index = catalog_.FileIndex(file);
  policy_->Served(group, index);
  const StallAccount::EpochEvent event = stall_.FileDone(index);
  if (event == StallAccount::kBegan) trace_.NextEpoch();  // the file is the next epoch's
  trace_.Record(index, group);
  if (event == StallAccount::kEndedWith) trace_.NextEpoch();
}

// Outside mu_: the bytes of a pinned hit are the whole member's, checked in place the
// first time it is read (a whole-blob checksum already covered it when there is one).
Status GroupCache::VerifyHit(NodeId file, const CachedBytes& bytes, uint64_t offset) {
  if (checks_->Verified(catalog_.FileIndex(file))) return Ok{};
  const uint32_t blob = catalog_.Group(catalog_.Extent(file).group).blob;
  Status s = checks_->Check(catalog_, file, bytes.data() - offset, source_.Describe(blob));
  if (!s) ++counters_.io_errors;
  return s;
}

// Outside mu_: the ungrouped way, for a member whose group cannot be cached.
// `from` says whether the disk tier (or its staging, the source's) served it.
Result<CachedBytes> GroupCache::ReadMember(NodeId file, uint64_t offset, size_t size,
                                           ServedFrom* from) {
  *from = ServedFrom::kSourceMember;
  if (tier_) {
    if (auto from_tier = tier_->ReadMember(file, offset, size, from)) {
      // Served from a staging: the source is fetching the whole group into the tier.
      if (*from == ServedFrom::kSourceGroup) stall_.Fetching(catalog_.Extent(file).group);
      return std::move(*from_tier);
    }
  }
  auto bytes = miss_.Read(file, offset, size, checks_.get(), stall_.epoch());
  if (!bytes) {
    ++counters_.io_errors;
    return bytes.error();
  }
  ++counters_.member_reads;
  counters_.bytes_from_source += bytes->size();
  counters_.member_bytes_from_source += bytes->size();
  counters_.bytes_served += bytes->size();
  return bytes;
}

// Under mu_: room for `group` in the arena, evicting if allowed; null when there is none.
GroupCache::Entry* GroupCache::Admit(uint32_t group, bool may_evict) {
  uint64_t start = 0;
  const size_t bytes = SpanOf(group, &start);
  std::optional<size_t> offset = arena_.Allocate(bytes);
  std::vector<uint32_t> pinned;  // victims a reader pinned on the hot path meanwhile
  while (!offset && may_evict) {
    const auto victim = policy_->Victim(busy_);
    if (!victim) break;
    if (!Evict(*victim)) {
      busy_[*victim] = true;  // for the next Victim call only
      pinned.push_back(*victim);
      continue;
    }
    offset = arena_.Allocate(bytes);
  }
  for (uint32_t g : pinned) busy_[g] = false;
  if (!offset) return nullptr;
  auto entry = std::make_shared<Entry>();
  entry->group = group;
  entry->arena_offset = *offset;
  entry->arena_bytes = bytes;
  entry->data_start = start;
  entries_[group] = std::move(entry);
  busy_[group] = true;
  return entries_[group].get();
}

// One XXH3 pass over bytes just read costs far less than reading them; it catches a blob
// rewritten in place with its size and time kept, which no fstat can see. Outside mu_:
// the damaged members are handed back, for the entry to take under mu_.
Status GroupCache::CheckWholeBlob(uint32_t group, const char* bytes,
                                  std::vector<uint32_t>* damaged) const {
  if (IntactGroup(group, bytes)) return Ok{};
  const GroupExtent& g = catalog_.Group(group);
  const std::string blob = source_.Describe(g.blob);
  if (!catalog_.has_checksums()) {
    return Fail(EIO,
                "cannot read group {}: blob {} does not match its checksum (changed or "
                "damaged)",
                group, blob);
  }
  // Rare, so a walk of the file table is fine: which members are still intact?
  size_t members = 0;
  for (uint32_t i = 0; i < catalog_.file_count(); ++i) {
    const FileExtent f = catalog_.ExtentAt(i);
    if (f.group != group) continue;
    ++members;
    if (ChecksumOf(bytes + (f.offset - g.offset), f.size) != catalog_.ChecksumAt(i)) {
      damaged->push_back(i);
    }
  }
  spdlog::warn(
      "blob {} does not match its checksum: {} of its {} files are damaged and read "
      "as EIO, the others are served",
      blob, damaged->size(), members);
  return Ok{};
}

// Under mu_: false when a reader holds the group pinned on the hot path, which busy_
// cannot show.
bool GroupCache::Evict(uint32_t group) {
  Entry& entry = *entries_[group];
  if (entry.hot) {
    uint64_t open = HotSlot::kOpen;  // and no pins
    if (!hot_[group].state.compare_exchange_strong(open, 0, std::memory_order_acq_rel)) {
      return false;
    }
    if (!hot_[group].unused_prefetch.exchange(false, std::memory_order_relaxed)) entry.used = true;
  }
  if (entry.prefetched && !entry.used) ++counters_.prefetch_wasted;
  arena_.Free(entry.arena_offset, entry.arena_bytes);
  policy_->Evicted(group);
  entries_[group].reset();
  busy_[group] = false;
  ++counters_.evictions;
  changed_.notify_all();
  return true;
}

// One of prefetch_depth loops: queues a group the policy still wants into free room, behind
// the demanded pieces, and waits for it, so that at most prefetch_depth are queued.
void GroupCache::Prefetch() {
  std::unique_lock lock(mu_);
  const uint32_t groups = static_cast<uint32_t>(entries_.size());
  while (!stop_) {
    if (!reading_) {
      changed_.wait(lock);
      continue;
    }
    uint32_t candidate = groups;
    for (uint32_t n = 0; n < groups; ++n) {
      const uint32_t g = (prefetch_cursor_ + n) % groups;
      if (!entries_[g] && !failed_[g] && policy_->Wanted(g) && !Staging(g)) {
        candidate = g;
        break;
      }
    }
    Entry* admitted = candidate < groups ? Admit(candidate, false) : nullptr;
    if (!admitted) {
      changed_.wait_for(lock, std::chrono::milliseconds(200));
      continue;
    }
    prefetch_cursor_ = candidate + 1;
    admitted->prefetched = true;
    ++counters_.prefetch_issued;
    ++prefetch_loads_;
    const EntryRef entry = entries_[candidate];
    StartLoad(entry, lock, nullptr);
    changed_.wait(lock, [&] { return entry->ready || entry->failed || stop_; });
    if (entry->failed) spdlog::warn("{}", entry->error.message);
    --prefetch_loads_;
  }
}

}  // namespace gpufs
