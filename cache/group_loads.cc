// The group cache's loads from the source, block by block (see group_cache.h).
//
// A volume or a store serves requests in the order it gets them, and a trainer's worker
// has one read outstanding: whatever sits ahead of that read is time the worker idles.
// So prefetch keeps only a window of requests in flight (enough to keep the source busy),
// while a read a reader waits on is sent the moment it is asked for, beside the window
// rather than behind it, marked urgent so the source's own queue lets it pass too. Demand
// counts against the window, so prefetch yields the room demand takes and the source sees
// about a window's worth either way; prefetch keeps an eighth of the most reads in flight
// whatever the demand, or a trainer that misses on every read would fetch the whole epoch
// in small requests. The queue, the window and the pump are the GroupLoader's
// (cache/load/group_loader.h); what a landed or failed read means is decided here.
//
// A demand read covers just the member's blocks: on a local volume a block is what the
// device takes as one request anyway (a piece); from a store it is small enough to cost
// about one request's latency, where a whole piece would cost its transfer time too.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/group_cache.h"

namespace gpufs {

// Under mu_ (released while the disk tier or the pump works): loads `entry`, which was
// just admitted, from the disk tier when it holds a copy, else queues its pieces, with
// those of `file` (when given) first. Returns once the blocks are queued.
void GroupCache::StartLoad(const EntryRef& entry, std::unique_lock<std::mutex>& lock,
                           const NodeId* file) {
  if (tier_ && LoadFromTier(*entry, lock)) return;
  stall_.Fetching(entry->group);
  const GroupExtent& g = catalog_.Group(entry->group);
  loader_.Start(
      entry, LoadSpan{g.blob, entry->data_start, entry->arena_bytes,
                      g.offset + g.size - entry->data_start, arena_.base() + entry->arena_offset});
  if (file) Urge(entry, *file);
  Pump(lock);
}

// Under mu_, released for the read: true when the group was read whole from its copy on
// disk (and is then ready, or failed its check).
bool GroupCache::LoadFromTier(Entry& entry, std::unique_lock<std::mutex>& lock) {
  const uint32_t group = entry.group;
  char* target = arena_.base() + entry.arena_offset;
  lock.unlock();
  const GroupExtent& g = catalog_.Group(group);
  const char* bytes = target + (g.offset - entry.data_start);
  const bool kept = tier_->ReadGroup(group, target, entry.arena_bytes, bytes);
  std::vector<uint32_t> damaged;
  Status s = kept ? CheckWholeBlob(group, bytes, &damaged) : Status(Ok{});
  lock.lock();
  if (!kept) return false;
  entry.from_tier = true;
  entry.damaged = std::move(damaged);
  Finish(entry, std::move(s));
  return true;
}

// Under mu_, released while submitting.
void GroupCache::Pump(std::unique_lock<std::mutex>& lock) {
  const bool pumped = loader_.Pump(source_, lock, [this] { return !stop_; });
  if (pumped && stop_) changed_.notify_all();  // the destructor waits for the pump to stop
}

// The loader's shape: blocks of the source's demand size, prefetch a piece a request, a
// window adapted between an eighth of the most reads in flight and all of them, and demand
// reads beside it up to the most (more readers than that wait their turn, first come).
LoaderOptions GroupCache::LoaderOptionsOf() const {
  const unsigned most = std::max(1u, options_.reads_in_flight);
  return LoaderOptions{.block = BlockBytes(),
                       .piece = options_.io_piece,
                       .window_most = most,
                       .floor = std::max(1u, most / 8),
                       .demand_most = most,
                       .adapt = options_.adapt_window};
}

// On a source thread: a run of blocks landed or failed.
void GroupCache::OnRun(const Run& run, bool demand, Result<size_t> got) {
  std::unique_lock lock(mu_);
  Entry& entry = *run.load;
  const GroupExtent& g = catalog_.Group(entry.group);
  switch (loader_.Complete(run, demand, got)) {
    case Landing::kLanded:  // readers of these blocks wait on no error now
      entry.failed_blocks.erase(entry.failed_blocks.lower_bound(run.first),
                                entry.failed_blocks.lower_bound(run.first + run.count));
      break;
    case Landing::kFailed: {
      Error error{got.error().code,
                  fmt::format("cannot read group {}: {}", entry.group, got.error().message)};
      if (run.count < entry.grid.size()) {
        FailBlocks(run, demand, std::move(error));
      } else {
        FailLoad(entry, std::move(error));
      }
      break;
    }
    case Landing::kShort:
      FailLoad(entry, Error{EIO, fmt::format("cannot read group {}: blob {} ends early",
                                             entry.group, source_.Describe(g.blob))});
      break;
    case Landing::kDropped:
      break;
  }
  SettleFailed(entry);
  if (entry.failed) {
    FreeFailed(entry);
  } else if (entry.grid.AllLanded()) {
    const char* bytes = arena_.base() + entry.arena_offset + (g.offset - entry.data_start);
    lock.unlock();  // readers may take members of the landed blocks meanwhile
    std::vector<uint32_t> damaged;
    Status s = CheckWholeBlob(entry.group, bytes, &damaged);
    lock.lock();
    entry.damaged = std::move(damaged);
    Finish(entry, std::move(s));
  }
  // Counted out only now: the destructor waits for this, and the check above unlocks.
  loader_.Retire();
  entry.landed.notify_all();
  if (loader_.in_flight() == 0) changed_.notify_all();
  Pump(lock);
}

// Under mu_: a read of part of a group failed. The readers waiting on its blocks get the
// error; the rest of the group does not depend on them and goes on. A demand read's blocks
// go back to prefetch's queue for one more try; a failed prefetch read's blocks wait for a
// reader, whose demand read tries them again. Once nothing is left to read, a group with
// failed blocks is dropped (see OnRun).
void GroupCache::FailBlocks(const Run& run, bool requeue, Error error) {
  Entry& entry = *run.load;
  ++counters_.io_errors;
  spdlog::warn("{}", error.message);
  for (uint32_t b = run.first; b < run.first + run.count; ++b) {
    entry.failed_blocks.insert_or_assign(b, error);
  }
  loader_.FailRun(run, requeue);
}

// Under mu_: once nothing of a load with failed blocks is left to read and no reader waits
// on it (each has its error, or its bytes pinned), the group is dropped, its error counted
// with the read that failed; a later reader loads it again.
void GroupCache::SettleFailed(Entry& entry) {
  if (entry.failed || entry.grid.failed == 0 || entry.failed_blocks.empty() || entry.waiters > 0 ||
      entry.grid.landed + entry.grid.failed < entry.grid.size()) {
    return;
  }
  DropLoad(entry, entry.failed_blocks.begin()->second);
  FreeFailed(entry);
}

// Under mu_: the error of a failed read of member `file`'s blocks, if any is not being
// read again.
const Error* GroupCache::BlockFailed(const Entry& entry, NodeId file) const {
  if (entry.failed_blocks.empty()) return nullptr;
  const auto [first, last] = BlocksOf(entry, file);
  for (auto it = entry.failed_blocks.lower_bound(first);
       it != entry.failed_blocks.end() && it->first <= last; ++it) {
    if (entry.grid.blocks[it->first] != BlockState::kInFlight) return &it->second;
  }
  return nullptr;
}

// Under mu_: fails every reader of a load whose request failed; its room is freed once no
// request of it is in flight.
void GroupCache::FailLoad(Entry& entry, Error error) {
  ++counters_.io_errors;
  DropLoad(entry, std::move(error));
}

// Under mu_: FailLoad, the error already counted.
void GroupCache::DropLoad(Entry& entry, Error error) {
  failed_[entry.group] = true;
  entry.failed = true;
  entry.error = std::move(error);
  entries_[entry.group].reset();  // `entry` lives on in the waiters and pieces that hold it
  busy_[entry.group] = false;
  entry.landed.notify_all();
  changed_.notify_all();
}

// Under mu_: a failed load's room is freed once no request writes into it and no member
// served early from it is still being sent.
void GroupCache::FreeFailed(Entry& entry) {
  if (!entry.failed || entry.room_freed || entry.grid.reads > 0 || entry.pins > 0) return;
  entry.room_freed = true;
  arena_.Free(entry.arena_offset, entry.arena_bytes);
}

// Under mu_: the end of a load whose bytes are all in.
void GroupCache::Finish(Entry& entry, Status status) {
  const uint32_t group = entry.group;
  if (!status) {
    FailLoad(entry, status.error());
    FreeFailed(entry);
    return;
  }
  failed_[group] = false;
  entry.ready = true;
  busy_[group] = entry.pins > 0;
  ++counters_.groups_loaded;
  policy_->Admitted(group);
  OpenHot(entry);
  if (tier_ && !entry.from_tier && entry.damaged.empty()) WriteBack(entry);
  entry.landed.notify_all();
  changed_.notify_all();
}

// The bytes of each block of a load's grid (a load's last block may be shorter).
size_t GroupCache::BlockBytes() const {
  if (options_.demand_block) return options_.demand_block;
  return options_.io_piece ? options_.io_piece : SIZE_MAX / 2;
}

// The blocks [first, last] that hold member `file` of the entry's group.
std::pair<uint32_t, uint32_t> GroupCache::BlocksOf(const Entry& entry, NodeId file) const {
  const FileExtent& f = catalog_.Extent(file);
  return loader_.BlocksOf(f.offset - entry.data_start, f.size);
}

// Under mu_: whether member `file` may be served from a load still in flight: its blocks
// have landed, and it can be checked alone wherever the whole group will be checked.
bool GroupCache::Servable(const Entry& entry, NodeId file) const {
  if (entry.failed || entry.grid.blocks.empty()) return false;
  if (HasBlobCheck(entry.group) && !catalog_.has_checksums()) return false;
  const auto [first, last] = BlocksOf(entry, file);
  return entry.grid.Landed(first, last + 1);
}

// Under mu_: a reader waits on member `file`; those of its blocks still queued go out as
// a demand read at the next Pump. Blocks already in flight are joined, not asked again.
void GroupCache::Urge(const EntryRef& entry, NodeId file) {
  if (entry->grid.blocks.empty()) return;
  const auto [first, last] = BlocksOf(*entry, file);
  for (uint32_t b = first; b <= last; ++b) {
    if (!BlockGrid::Demandable(entry->grid.blocks[b])) continue;
    // A failed read's error was for the readers that waited on it, not this one.
    entry->failed_blocks.erase(entry->failed_blocks.lower_bound(first),
                               entry->failed_blocks.upper_bound(last));
    loader_.Demand(entry, first, last);
    return;
  }
}

// Outside mu_: a member served before its group's whole-blob check is checked alone, as
// that check would have (the pinned bytes are the whole member's).
Status GroupCache::CheckEarlyMember(NodeId file, const CachedBytes& bytes, uint64_t offset) {
  const uint32_t group = catalog_.Extent(file).group;
  if (!HasBlobCheck(group)) return Ok{};
  Status s = CheckMember(catalog_, file, bytes.data() - offset,
                         source_.Describe(catalog_.Group(group).blob));
  if (!s) ++counters_.io_errors;
  return s;
}

// Whether a group's load is checked against its blob's checksum (a whole-blob group).
bool GroupCache::HasBlobCheck(uint32_t group) const {
  const GroupExtent& g = catalog_.Group(group);
  const BlobInfo* seen = source_.Expected(g.blob);
  return seen && seen->checksum != 0 && g.offset == 0 && g.size == seen->size;
}

}  // namespace gpufs
