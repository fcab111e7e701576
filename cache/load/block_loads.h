// Loads read block by block (group_loader.h schedules them for the group cache and the
// tier stager alike).
//
// A load's bytes are a grid of equal blocks (the last may be shorter), each queued, in
// flight, landed or failed. A BlockQueue orders what goes to the source next: first the
// runs of blocks readers wait on, first come (a demand, sent at once, beside the window),
// then runs of the oldest load's queued blocks, up to a piece each (prefetch, within the
// window). Blocks already in flight are joined by a reader, never asked for twice.
//
// What each owner decides for itself stays with it: the lock (everything here is guarded by
// the owner's), how many reads of each kind may be in flight, what a completion does, and
// what a failed block means.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

namespace gpufs {

// What a load reads: a span of a blob, into a buffer.
struct LoadSpan {
  uint32_t blob = 0;
  uint64_t start = 0;      // blob offset of the load's first byte
  uint64_t length = 0;     // bytes read: the grid's
  uint64_t need = 0;       // bytes of them the load needs (the rest may lie past the blob's end)
  char* buffer = nullptr;  // where they land
};

// kFailed: a read of the block failed; a reader's demand read asks for it again.
enum class BlockState : uint8_t { kQueued, kInFlight, kLanded, kFailed };

// The blocks of one load and how far its reads have got.
struct BlockGrid {
  LoadSpan span;
  std::vector<BlockState> blocks;
  uint32_t next = 0;    // the first block that may still be queued
  uint32_t landed = 0;  // blocks landed
  uint32_t failed = 0;  // blocks kFailed
  uint32_t reads = 0;   // requests in flight
  bool queued = false;  // in its queue's prefetch order

  // `read`'s bytes in blocks of `block`, all queued.
  void Assign(const LoadSpan& read, size_t block) {
    span = read;
    blocks.assign((read.length + block - 1) / block, BlockState::kQueued);
  }
  uint32_t size() const { return static_cast<uint32_t>(blocks.size()); }
  bool Landed(uint32_t first, uint32_t end) const {
    return std::all_of(blocks.begin() + first, blocks.begin() + end,
                       [](BlockState b) { return b == BlockState::kLanded; });
  }
  bool AllLanded() const { return landed == blocks.size(); }
  // One request's blocks [first, first + count), in flight from now.
  void Send(uint32_t first, uint32_t count) {
    for (uint32_t b = first; b < first + count; ++b) {
      if (blocks[b] == BlockState::kFailed) --failed;
      blocks[b] = BlockState::kInFlight;
    }
    ++reads;
  }
  void Land(uint32_t first, uint32_t count) {
    for (uint32_t b = first; b < first + count; ++b) blocks[b] = BlockState::kLanded;
    landed += count;
  }
  // Blocks a reader's demand read may ask for: queued, or failed before (asked again).
  static bool Demandable(BlockState state) {
    return state == BlockState::kQueued || state == BlockState::kFailed;
  }
};

// A run of a load's blocks, read as one request. `Load` holds a BlockGrid `grid` and a
// `failed` flag (a failed load sends nothing more).
template <typename Load>
struct BlockRun {
  std::shared_ptr<Load> load;
  uint32_t first = 0;
  uint32_t count = 0;
  std::chrono::steady_clock::time_point sent{};  // when its read went to the source
};

template <typename Load>
class BlockQueue {
 public:
  using Ref = std::shared_ptr<Load>;
  using Run = BlockRun<Load>;

  // Puts `load` at the back of the prefetch order, unless it is in it.
  void Add(const Ref& load) {
    if (load->grid.queued) return;
    load->grid.queued = true;
    loads_.push_back(load);
  }
  // A reader waits on these blocks; those still demandable go out at the next TakeDemands.
  void Demand(Run run) { demands_.push_back(std::move(run)); }
  bool HasDemands() const { return !demands_.empty(); }
  void ClearDemands() { demands_.clear(); }
  // The loads still in the prefetch order, taken out of it.
  std::deque<Ref> TakeLoads() {
    for (const Ref& load : loads_) load->grid.queued = false;
    return std::exchange(loads_, {});
  }

  // While `room()` allows: hands each run of demandable blocks readers wait on to `send`,
  // first come (a wanted run whose blocks are partly in flight gives one run per gap).
  template <typename Room, typename Send>
  void TakeDemands(Room room, Send send) {
    while (!demands_.empty() && room()) {
      const Run wanted = std::move(demands_.front());
      demands_.pop_front();
      const BlockGrid& grid = wanted.load->grid;
      if (wanted.load->failed) continue;
      const uint32_t end = wanted.first + wanted.count;
      for (uint32_t b = wanted.first; b < end; ++b) {
        if (!BlockGrid::Demandable(grid.blocks[b])) continue;
        uint32_t last = b;
        while (last + 1 < end && BlockGrid::Demandable(grid.blocks[last + 1])) ++last;
        send(Run{wanted.load, b, last - b + 1});
        b = last;
      }
    }
  }

  // The next run of queued blocks of the oldest load, at most `most` long; a run with no
  // load when none is left. Loads with nothing more to send leave the order.
  Run NextPrefetch(uint32_t most) {
    while (!loads_.empty()) {
      BlockGrid& grid = loads_.front()->grid;
      const uint32_t count = grid.size();
      while (grid.next < count && grid.blocks[grid.next] != BlockState::kQueued) ++grid.next;
      if (loads_.front()->failed || grid.next == count) {
        grid.queued = false;
        loads_.pop_front();
        continue;
      }
      const uint32_t first = grid.next;
      uint32_t end = first + 1;
      while (end < count && end - first < most && grid.blocks[end] == BlockState::kQueued) ++end;
      grid.next = end;
      return Run{loads_.front(), first, end - first};
    }
    return Run{};
  }

 private:
  std::deque<Run> demands_;  // blocks readers wait on, first come
  std::deque<Ref> loads_;    // loads with blocks still queued, oldest first
};

}  // namespace gpufs
