// The group cache's hot path (see group_cache.h): a read of a ready group pinned in its
// own slot without the cache's lock, and the pins of the bytes handed to replies.
#include "cache/group_cache.h"

namespace gpufs {

// Without mu_: a member of a ready group, pinned in its hot slot; nullopt when the group
// is not open there (not cached, loading, or with damaged members), for Read's slow path.
std::optional<CachedBytes> GroupCache::ServeHot(NodeId file, uint64_t offset, size_t size) {
  const FileExtent& f = catalog_.Extent(file);
  HotSlot& slot = hot_[f.group];
  uint64_t state = slot.state.load(std::memory_order_relaxed);
  do {
    if (!(state & HotSlot::kOpen)) return std::nullopt;
  } while (!slot.state.compare_exchange_weak(state, state + 1, std::memory_order_acquire,
                                             std::memory_order_relaxed));
  // Pinned: the slot's fields hold until UnpinHot.
  ++counters_.hits;
  if (slot.unused_prefetch.load(std::memory_order_relaxed) &&
      slot.unused_prefetch.exchange(false, std::memory_order_relaxed)) {
    ++counters_.prefetch_used;
  }
  counters_.bytes_served += size;
  stall_.Served(ServedFrom::kMemory, size, 0, f.group);  // before the file's end: its epoch's
  if (offset + size >= f.size) FileDone(f.group, file);
  return CachedBytes::Pinned(
      this, arena_.base() + slot.arena_offset + (f.offset + offset - slot.data_start), size, &slot);
}

// Under mu_: a group just made ready opens its hot slot, unless reads of it must be
// checked against its damaged list (rare: those stay on the slow path).
void GroupCache::OpenHot(Entry& entry) {
  if (!entry.damaged.empty()) return;
  HotSlot& slot = hot_[entry.group];
  slot.arena_offset = entry.arena_offset;
  slot.data_start = entry.data_start;
  slot.unused_prefetch.store(entry.prefetched && !entry.used, std::memory_order_relaxed);
  slot.state.store(HotSlot::kOpen, std::memory_order_release);
  entry.hot = true;
}

// Under mu_: pins the group and points into it.
Result<CachedBytes> GroupCache::ServeHit(uint32_t group, NodeId file, uint64_t offset,
                                         size_t size) {
  Entry& entry = *entries_[group];
  const FileExtent& f = catalog_.Extent(file);
  if (std::binary_search(entry.damaged.begin(), entry.damaged.end(), catalog_.FileIndex(file))) {
    ++counters_.io_errors;
    return Fail(EIO, "cannot read {}: its checksum does not match; {} is damaged",
                catalog_.PathOf(file), source_.Describe(catalog_.Group(group).blob));
  }
  if (entry.prefetched && !entry.used) ++counters_.prefetch_used;
  entry.used = true;
  ++entry.pins;
  busy_[group] = true;
  counters_.bytes_served += size;
  return CachedBytes::Pinned(
      this, arena_.base() + entry.arena_offset + (f.offset + offset - entry.data_start), size,
      nullptr, entries_[group]);
}

void GroupCache::Unpin(void* hot, void* entry) {
  if (hot) return UnpinHot(hot);
  UnpinEntry(entry);
}

// `pinned` is the pinned load, kept alive by the bytes: a load that failed after a member
// was served early has left the table, and its room waits for this.
void GroupCache::UnpinEntry(void* pinned) {
  std::lock_guard lock(mu_);
  Entry& entry = *static_cast<Entry*>(pinned);
  --entry.pins;
  if (entries_[entry.group].get() != &entry) return FreeFailed(entry);
  if (entry.pins == 0) busy_[entry.group] = !entry.ready;  // served early: still loading
}

// Without mu_: a hot slot's pin; eviction looks at the count when it needs room, so
// nobody is woken.
void GroupCache::UnpinHot(void* slot) {
  static_cast<HotSlot*>(slot)->state.fetch_sub(1, std::memory_order_release);
}

}  // namespace gpufs
