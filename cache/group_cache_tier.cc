// The group cache's side of its lower tier (cache/lower_tier.h), see group_cache.h: groups
// loaded into the pinned tier kept there too, and what the tier holds.

#include "cache/group_cache.h"
#include "dataset/format/checksums.h"

namespace gpufs {

// Under mu_: a group loaded from the source is kept in the lower tier too, pinned until
// written (groups without room in the pinned tier are staged instead: tier_staging.h). At
// unmount a load that lands its last pieces is still written back.
void GroupCache::WriteBack(Entry& entry) {
  const uint32_t group = entry.group;
  if (failed_[group]) return;
  // The lower tier calls back without its own lock, so taking mu_ there keeps the order.
  auto written = [this, held = entries_[group]] {
    std::lock_guard lock(mu_);
    if (--held->pins == 0) busy_[held->group] = false;
    changed_.notify_all();
  };
  if (!tier_->WriteBack(group, arena_.base() + entry.arena_offset, entry.arena_bytes,
                        std::move(written))) {
    return;
  }
  ++entry.pins;
  busy_[group] = true;
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
