// The group cache's side of the disk tier: member reads served from a group's copy on
// disk, and the background work that fills the tier (see group_cache.h).
#include <cstdlib>

#include <fmt/format.h>

#include "cache/group_cache.h"
#include "dataset/format/checksums.h"

namespace gpufs {
namespace {

// Queued work beyond this is dropped: a write-back holds its group pinned, and a fill
// not made now is asked for again by the group's next member read.
constexpr size_t kMaxTierJobs = 64;
constexpr size_t kMaxWriteBacks = 16;

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};

}  // namespace

// Outside mu_: the member from its group's copy on disk, checked; nullopt when there is
// no copy (a fill is queued) or it was damaged.
std::optional<Result<CachedBytes>> GroupCache::ReadMemberFromTier(NodeId file, uint64_t offset,
                                                                  size_t size) {
  const FileExtent& f = catalog_.Extent(file);
  const std::string& name = tier_names_[f.group];
  if (name.empty()) return std::nullopt;
  const bool verify = checks_ && !checks_->Verified(catalog_.FileIndex(file));
  const uint32_t index = catalog_.FileIndex(file);
  const uint64_t bit = uint64_t{1} << (index % 64);
  const bool hash =
      tier_hashed_ && (tier_hashed_[index / 64].load(std::memory_order_relaxed) & bit) == 0;
  const bool whole = verify || hash;  // to check, the whole member
  const uint64_t from = whole ? 0 : offset;
  const size_t length = whole ? static_cast<size_t>(f.size) : size;
  uint64_t start = 0;
  SpanOf(f.group, &start);
  auto bytes = std::make_unique<char[]>(std::max<size_t>(length, 1));
  if (!tier_->ReadSlice(name, f.offset + from - start, length, bytes.get()) ||
      (hash && !TierCopyTrusted(f.group, f.offset, bytes.get(), length))) {
    if (options_.whole_groups) {
      std::lock_guard lock(mu_);
      QueueTierJob(f.group, false);
    }
    return std::nullopt;
  }
  if (hash) tier_hashed_[index / 64].fetch_or(bit, std::memory_order_relaxed);
  if (verify) {
    const std::string blob = source_.Describe(catalog_.Group(f.group).blob);
    if (Status s = checks_->Check(catalog_, file, bytes.get(), blob); !s) {
      ++counters_.io_errors;
      return Result<CachedBytes>(s.error());
    }
  }
  ++counters_.member_reads;
  counters_.bytes_served += size;
  std::lock_guard lock(mu_);
  if (offset + size >= f.size) policy_->Served(f.group, catalog_.FileIndex(file));
  return Result<CachedBytes>(CachedBytes::Owned(std::move(bytes), offset - from, size));
}

// Under mu_. A write-back pins its group until written; write-backs go first, as they
// hold memory.
void GroupCache::QueueTierJob(uint32_t group, bool write_back) {
  // At unmount a load that lands its last pieces is still written back; fills are not made.
  if (tier_queued_[group] || failed_[group] || tier_stop_ || (stop_ && !write_back) ||
      tier_names_[group].empty()) {
    return;
  }
  const size_t write_backs = static_cast<size_t>(std::count_if(
      tier_jobs_.begin(), tier_jobs_.end(), [](const TierJob& j) { return j.write_back; }));
  if (tier_jobs_.size() >= kMaxTierJobs || (write_back && write_backs >= kMaxWriteBacks)) return;
  tier_queued_[group] = true;
  if (write_back) {
    ++entries_[group]->pins;
    busy_[group] = true;
    tier_jobs_.push_front(TierJob{group, true});
  } else {
    tier_jobs_.push_back(TierJob{group, false});
  }
  tier_wake_.notify_one();
}

void GroupCache::TierLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    tier_wake_.wait(lock, [this] { return tier_stop_ || !tier_jobs_.empty(); });
    // At the end, groups already in memory are still written (a local write each); the
    // fills, which would wait on the source, are dropped.
    if (stop_) std::erase_if(tier_jobs_, [](const TierJob& j) { return !j.write_back; });
    if (tier_jobs_.empty()) {
      if (tier_stop_) return;
      continue;
    }
    const TierJob job = tier_jobs_.front();
    tier_jobs_.pop_front();
    if (job.write_back) {
      Entry& entry = *entries_[job.group];  // pinned: neither evicted nor moved
      const char* bytes = arena_.base() + entry.arena_offset;
      const size_t length = entry.arena_bytes;
      lock.unlock();
      tier_->Write(tier_names_[job.group], bytes, length);
      lock.lock();
      if (--entry.pins == 0) busy_[job.group] = false;
      changed_.notify_all();
    } else {
      lock.unlock();
      FillTier(job.group);
      lock.lock();
    }
    tier_queued_[job.group] = false;
  }
}

// Outside mu_: fetches a group the pinned tier has no room for straight to the disk tier.
void GroupCache::FillTier(uint32_t group) {
  const std::string& name = tier_names_[group];
  if (tier_->Present(name)) return;
  uint64_t start = 0;
  const size_t length = SpanOf(group, &start);
  const size_t room = PinnedArena::RoundUp(length);
  std::unique_ptr<char, FreeDeleter> buffer(
      static_cast<char*>(std::aligned_alloc(DiskTier::kAlign, room)));
  if (!buffer) return;
  std::fill(buffer.get(), buffer.get() + room, 0);
  const GroupExtent& g = catalog_.Group(group);
  auto got =
      ReadRange(source_, ReadKind::kGroup, g.blob, start, length, buffer.get(), options_.io_piece);
  // A failed or damaged read is left to the readers' own loads, which report it.
  if (!got || *got < g.offset + g.size - start) return;
  counters_.bytes_from_disk += *got;
  if (!IntactGroup(group, buffer.get() + (g.offset - start))) return;
  ++counters_.tier_fills;
  tier_->Write(name, buffer.get(), length);
}

// Whether a whole-blob group matches the blob's checksum, where the index has one.
bool GroupCache::IntactGroup(uint32_t group, const char* bytes) const {
  if (!HasBlobCheck(group)) return true;
  const GroupExtent& g = catalog_.Group(group);
  return ChecksumOf(bytes, g.size) == source_.Expected(g.blob)->checksum;
}

bool GroupCache::TierCopyTrusted(uint32_t group, uint64_t offset, const char* bytes,
                                 size_t length) {
  if (!catalog_.has_sha256()) return true;  // nothing stronger than the tier's own sums
  const std::string& name = tier_names_[group];
  if (!tier_digests_) return false;
  const auto bad = tier_digests_->Mismatches(catalog_.Group(group).blob, offset, bytes, length);
  if (bad.empty()) return true;
  tier_->Reject(name, fmt::format("{} of its files do not match the SHA-256 of the index, {} first",
                                  bad.size(), bad.front().path));
  return false;
}

std::vector<bool> GroupCache::TierGroups() const {
  std::vector<bool> present(catalog_.group_count(), false);
  if (!tier_) return present;
  for (uint32_t g = 0; g < present.size(); ++g) present[g] = tier_->Present(tier_names_[g]);
  return present;
}

}  // namespace gpufs
