// The group cache's loads from the source, piece by piece (see group_cache.h).
//
// Every load's pieces go through one queue with a bounded number in flight: a volume
// serves requests in the order it gets them, so a piece a reader waits on must not sit
// behind a whole group already handed to the kernel. Keeping only a few pieces in flight
// and choosing the next one here lets a demanded piece go next, while the queue behind it
// keeps the volume busy.
//
// Pieces are submitted outside mu_, by one thread at a time (the pump); a completion that
// arrives while another thread pumps leaves the next pieces to that thread, so a source
// that completes inside Submit never recurses.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/group_cache.h"

namespace gpufs {

// Under mu_ (released while the disk tier or the pump works): loads `entry`, which was
// just admitted, from the disk tier when it holds a copy, else queues its pieces, with
// those of `file` (when given) first. Returns once the pieces are queued.
void GroupCache::StartLoad(const EntryRef& entry, std::unique_lock<std::mutex>& lock,
                           const NodeId* file) {
  if (tier_ && LoadFromTier(*entry, lock)) return;
  const size_t piece = PieceBytes(*entry);
  entry->pieces.assign((entry->arena_bytes + piece - 1) / piece, Piece::kQueued);
  load_queue_.push_back(entry);
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
  const bool kept = tier_->ReadWhole(tier_names_[group], target, entry.arena_bytes) &&
                    TierCopyTrusted(group, g.offset, bytes, g.size);
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
  if (pumping_) {
    pump_again_ = true;
    return;
  }
  pumping_ = true;
  for (;;) {
    pump_again_ = false;
    std::vector<BlobRead> reads = NextPieces();
    if (reads.empty() && !pump_again_) break;
    lock.unlock();
    if (!reads.empty()) source_.Submit(ReadKind::kGroup, std::move(reads));
    lock.lock();
  }
  pumping_ = false;
  changed_.notify_all();  // the destructor waits for the pump to stop
}

// Under mu_: the pieces to submit now, marked in flight.
std::vector<BlobRead> GroupCache::NextPieces() {
  std::vector<BlobRead> reads;
  while (!stop_ && pieces_in_flight_ < std::max(1u, options_.reads_in_flight)) {
    // Not a structured binding: the callback below captures these by name.
    const std::pair<EntryRef, uint32_t> picked = PickPiece();
    const EntryRef& entry = picked.first;
    const uint32_t piece = picked.second;
    if (!entry) break;
    entry->pieces[piece] = Piece::kInFlight;
    ++entry->pieces_in_flight;
    ++pieces_in_flight_;
    const size_t size = PieceBytes(*entry);
    const uint64_t at = uint64_t{piece} * size;
    BlobRead read;
    read.blob = catalog_.Group(entry->group).blob;
    read.offset = entry->data_start + at;
    read.length = std::min<uint64_t>(size, entry->arena_bytes - at);
    read.buffer = arena_.base() + entry->arena_offset + at;
    read.done = [this, entry, piece](Result<size_t> got) { OnPiece(entry, piece, std::move(got)); };
    reads.push_back(std::move(read));
  }
  return reads;
}

// Under mu_: a piece a reader waits on, else the next piece of the oldest load.
std::pair<GroupCache::EntryRef, uint32_t> GroupCache::PickPiece() {
  while (!urgent_.empty()) {
    auto [entry, piece] = std::move(urgent_.front());
    urgent_.pop_front();
    if (!entry->failed && entry->pieces[piece] == Piece::kQueued) return {entry, piece};
  }
  while (!load_queue_.empty()) {
    Entry& entry = *load_queue_.front();
    const uint32_t count = static_cast<uint32_t>(entry.pieces.size());
    while (entry.next_piece < count && entry.pieces[entry.next_piece] != Piece::kQueued) {
      ++entry.next_piece;
    }
    if (entry.failed || entry.next_piece == count) {
      load_queue_.pop_front();
      continue;
    }
    return {load_queue_.front(), entry.next_piece++};
  }
  return {nullptr, 0};
}

// On a source thread: one piece landed or failed.
void GroupCache::OnPiece(const EntryRef& entry, uint32_t piece, Result<size_t> got) {
  std::unique_lock lock(mu_);
  --entry->pieces_in_flight;
  const GroupExtent& g = catalog_.Group(entry->group);
  if (!entry->failed) {
    const size_t size = PieceBytes(*entry);
    const uint64_t from = entry->data_start + uint64_t{piece} * size;
    const uint64_t end = g.offset + g.size;  // what the group needs of the blob
    const uint64_t need = end > from ? std::min<uint64_t>(end - from, size) : 0;
    if (!got) {
      FailLoad(*entry, Error{got.error().code, fmt::format("cannot read group {}: {}", entry->group,
                                                           got.error().message)});
    } else if (*got < need) {
      FailLoad(*entry, Error{EIO, fmt::format("cannot read group {}: blob {} ends early",
                                              entry->group, source_.Describe(g.blob))});
    } else {
      entry->pieces[piece] = Piece::kLanded;
      ++entry->pieces_landed;
      counters_.bytes_from_disk += *got;
    }
  }
  if (entry->failed) {
    FreeFailed(*entry);
  } else if (entry->pieces_landed == entry->pieces.size()) {
    const char* bytes = arena_.base() + entry->arena_offset + (g.offset - entry->data_start);
    lock.unlock();  // readers may take members of the landed pieces meanwhile
    std::vector<uint32_t> damaged;
    Status s = CheckWholeBlob(entry->group, bytes, &damaged);
    lock.lock();
    entry->damaged = std::move(damaged);
    Finish(*entry, std::move(s));
  }
  // Counted out only now: the destructor waits for this, and the check above unlocks.
  --pieces_in_flight_;
  changed_.notify_all();
  Pump(lock);
}

// Under mu_: fails every reader of a load whose piece failed; its room is freed once no
// piece of it is in flight.
void GroupCache::FailLoad(Entry& entry, Error error) {
  ++counters_.io_errors;
  failed_[entry.group] = true;
  entry.failed = true;
  entry.error = std::move(error);
  entries_[entry.group].reset();  // `entry` lives on in the waiters and pieces that hold it
  busy_[entry.group] = false;
  changed_.notify_all();
}

// Under mu_: a failed load's room is freed once no piece writes into it and no member
// served early from it is still being sent.
void GroupCache::FreeFailed(Entry& entry) {
  if (!entry.failed || entry.room_freed || entry.pieces_in_flight > 0 || entry.pins > 0) return;
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
  if (tier_ && !entry.from_tier && entry.damaged.empty()) QueueTierJob(group, true);
  changed_.notify_all();
}

// The bytes of each piece of the entry's load (the last one may be shorter).
size_t GroupCache::PieceBytes(const Entry& entry) const {
  return options_.io_piece ? options_.io_piece : entry.arena_bytes;
}

// The pieces [first, last] that hold member `file` of the entry's group.
std::pair<uint32_t, uint32_t> GroupCache::PiecesOf(const Entry& entry, NodeId file) const {
  const FileExtent& f = catalog_.Extent(file);
  const size_t size = PieceBytes(entry);
  const uint64_t from = f.offset - entry.data_start;
  const uint64_t to = from + std::max<uint64_t>(f.size, 1) - 1;
  return {static_cast<uint32_t>(from / size), static_cast<uint32_t>(to / size)};
}

// Under mu_: whether member `file` may be served from a load still in flight: its pieces
// have landed, and it can be checked alone wherever the whole group will be checked.
bool GroupCache::Servable(const Entry& entry, NodeId file) const {
  if (entry.failed || entry.pieces.empty()) return false;
  if (HasBlobCheck(entry.group) && !catalog_.has_checksums()) return false;
  const auto [first, last] = PiecesOf(entry, file);
  for (uint32_t p = first; p <= last; ++p) {
    if (entry.pieces[p] != Piece::kLanded) return false;
  }
  return true;
}

// Under mu_: a reader waits on member `file`; its queued pieces go next.
void GroupCache::Urge(const EntryRef& entry, NodeId file) {
  if (entry->pieces.empty()) return;
  const auto [first, last] = PiecesOf(*entry, file);
  for (uint32_t p = first; p <= last; ++p) {
    if (entry->pieces[p] == Piece::kQueued) urgent_.emplace_back(entry, p);
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
