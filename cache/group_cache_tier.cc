// The group cache's write-backs of groups loaded into the pinned tier into the disk tier
// (its reads from the tier and its staging are cache_tier.h's), see group_cache.h.

#include "cache/group_cache.h"
#include "dataset/format/checksums.h"

namespace gpufs {
namespace {

// Write-backs beyond this are dropped: each holds its group pinned.
constexpr size_t kMaxWriteBacks = 16;

}  // namespace

// Under mu_. A write-back pins its group until written (groups without room in the
// pinned tier are staged instead: tier_staging.h). At unmount a load that lands its last
// pieces is still written back.
void GroupCache::QueueTierJob(uint32_t group, bool write_back) {
  if (!write_back || tier_queued_[group] || failed_[group] || tier_stop_ || !tier_->Keeps(group) ||
      tier_jobs_.size() >= kMaxWriteBacks) {
    return;
  }
  tier_queued_[group] = true;
  ++entries_[group]->pins;
  busy_[group] = true;
  tier_jobs_.push_back(TierJob{group, true});
  tier_wake_.notify_one();
}

void GroupCache::TierLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    tier_wake_.wait(lock, [this] { return tier_stop_ || !tier_jobs_.empty(); });
    if (tier_jobs_.empty()) {
      if (tier_stop_) return;
      continue;
    }
    const TierJob job = tier_jobs_.front();
    tier_jobs_.pop_front();
    Entry& entry = *entries_[job.group];  // pinned: neither evicted nor moved
    const char* bytes = arena_.base() + entry.arena_offset;
    const size_t length = entry.arena_bytes;
    lock.unlock();
    tier_->Write(job.group, bytes, length);
    lock.lock();
    if (--entry.pins == 0) busy_[job.group] = false;
    changed_.notify_all();
    tier_queued_[job.group] = false;
  }
}

// Whether a whole-blob group matches the blob's checksum, where the index has one.
bool GroupCache::IntactGroup(uint32_t group, const char* bytes) const {
  if (!HasBlobCheck(group)) return true;
  const GroupExtent& g = catalog_.Group(group);
  return ChecksumOf(bytes, g.size) == source_.Expected(g.blob)->checksum;
}

bool GroupCache::Staging(uint32_t group) const { return tier_ && tier_->Staging(group); }

std::vector<bool> GroupCache::TierGroups() const {
  return tier_ ? tier_->Groups() : std::vector<bool>(catalog_.group_count(), false);
}

}  // namespace gpufs
