// One scheduler of block reads, for every owner that loads groups from the source: the
// group cache into the pinned arena (cache/group_loads.cc) and the tier stager into its
// buffers (cache/tier_staging.cc).
//
// A load is a span of a blob read into a buffer as a grid of blocks (block_loads.h). The
// loader owns what the reads of all loads share: the queue (demand first, then the oldest
// load's blocks, a piece at a time), the window of requests in flight, the pump that
// submits them outside the owner's lock, and the first half of each completion (the run's
// blocks landed, or what went wrong). What a landed or failed run means to the load (check
// it, write it, fail its readers, try again) stays with the owner, who is called back.
//
// The window: demand reads go out at once, beside it (at most `demand_most` at a time,
// when bounded); prefetch fills what demand leaves of `window`, and always keeps `floor`
// reads of its own in flight, so a stream of demands cannot starve the loads that make
// later reads hits. With `adapt`, the window follows what demand reads cost, as a TCP
// sender's follows loss: a source with one queue (a disk, a throttled volume, a store's
// object servers) makes a demand read wait behind every read already handed to it, so its
// latency grows with the window. The window starts at its floor, so the first demand
// reads measure a read on an idle source; it grows by a read when a demand read cost
// under twice the least seen, or when a prefetch read lands while no reader waits, and
// shrinks by a quarter when a demand read cost more. The least latency creeps up by 5% a
// read, so a source that became slower is learnt anew. Without `adapt` it stays at
// `window_most`.
//
// Thread-safety: everything is guarded by the owner's lock, which every method but the
// constructor expects held; Pump releases it while submitting.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "base/error.h"
#include "cache/load/block_loads.h"
#include "cache/load/read_pump.h"
#include "source/blob_source.h"

namespace gpufs {

struct LoaderOptions {
  size_t block = 1 << 20;    // bytes per block: a demand read's unit; a load's last is shorter
  size_t piece = 0;          // bytes per prefetch read at most, rounded to blocks; 0: a whole load
  unsigned window_most = 1;  // prefetch and demand requests in flight the window allows
  unsigned floor = 1;        // prefetch requests kept in flight whatever the demand
  unsigned demand_most = 0;  // demand requests in flight at most; 0: unbounded
  bool adapt = false;        // the window follows demand latency (above)
};

// Where the counts of a loader's reads go (each may be null). Atomics: read without the lock.
struct LoaderCounts {
  std::atomic<uint64_t>* demand_reads = nullptr;  // a request per run readers waited on
  std::atomic<uint64_t>* bytes = nullptr;         // bytes landed from the source
};

// How a run's read ended, as its completion first sees it.
enum class Landing {
  kLanded,   // its blocks are in, past the blob's end zeros
  kFailed,   // the source failed the read (`got`'s error)
  kShort,    // fewer bytes than the load needs: the blob ends early
  kDropped,  // the load had failed already; its bytes are not wanted
};

// `Load` holds a BlockGrid `grid` and a `failed` flag (a failed load sends nothing more).
template <typename Load>
class GroupLoader {
 public:
  using Ref = std::shared_ptr<Load>;
  using Run = BlockRun<Load>;
  // Called on a source thread, without the lock, when a run's read ends.
  using Done = std::function<void(const Run& run, bool demand, Result<size_t> got)>;

  GroupLoader(LoaderOptions options, LoaderCounts counts, Done done)
      : options_(Clamped(options)),
        counts_(counts),
        done_(std::move(done)),
        window_(options_.adapt ? options_.floor : options_.window_most) {}

  // `load`'s span, all its blocks queued behind those of earlier loads.
  void Start(const Ref& load, const LoadSpan& span) {
    load->grid.Assign(span, options_.block);
    queue_.Add(load);
  }
  // A reader waits on blocks [first, last] of `load`; those still demandable go out at the
  // next Pump, as a request of their own. Blocks in flight are joined, not asked again.
  void Demand(const Ref& load, uint32_t first, uint32_t last) {
    queue_.Demand(Run{load, first, last - first + 1});
  }
  // The blocks [first, last] that hold bytes [offset, offset + size) of a load.
  std::pair<uint32_t, uint32_t> BlocksOf(uint64_t offset, uint64_t size) const {
    const uint64_t last = offset + std::max<uint64_t>(size, 1) - 1;
    return {static_cast<uint32_t>(offset / options_.block),
            static_cast<uint32_t>(last / options_.block)};
  }
  size_t block() const { return options_.block; }

  // Submits what the queue and the window allow, outside `lock`, until nothing more may
  // go; `before()` runs under the lock ahead of each choice and returns false once nothing
  // may be sent (the owner stops). False when another thread is pumping (it looks again).
  template <typename Before>
  bool Pump(BlobSource& source, std::unique_lock<std::mutex>& lock, Before before) {
    return pump_.Run(source, lock,
                     [&] { return before() ? NextReads() : std::vector<BlobRead>{}; });
  }

  // The first half of a completion: the run's read is over; its blocks landed (and are
  // counted) or the reason they did not. `got` as the source gave it.
  Landing Complete(const Run& run, bool demand, const Result<size_t>& got) {
    const auto now = std::chrono::steady_clock::now();
    Load& load = *run.load;
    --load.grid.reads;
    if (demand) --demand_in_flight_;
    if (got) Adapt(demand, now - run.sent);
    if (load.failed) return Landing::kDropped;
    if (!got) return Landing::kFailed;
    const LoadSpan& span = load.grid.span;
    const uint64_t at = uint64_t{run.first} * options_.block;
    const uint64_t length = RunLength(run);
    const uint64_t need = span.need > at ? std::min<uint64_t>(span.need - at, length) : 0;
    if (*got < need) return Landing::kShort;
    // Past the blob's end: zeros, as a read of a file gives, never earlier bytes.
    if (*got < length) std::memset(span.buffer + at + *got, 0, length - *got);
    load.grid.Land(run.first, run.count);
    if (counts_.bytes) *counts_.bytes += *got;
    return Landing::kLanded;
  }
  // The last of a completion, once the owner has acted on it (the owner's destructor waits
  // for the count to reach 0, so it drops only now).
  void Retire() { --in_flight_; }
  // A failed run's blocks: back in the queue (a demand read's, for one more try), or
  // kFailed, for a reader's demand read to try again.
  void FailRun(const Run& run, bool requeue) {
    BlockGrid& grid = run.load->grid;
    for (uint32_t b = run.first; b < run.first + run.count; ++b) {
      grid.blocks[b] = requeue ? BlockState::kQueued : BlockState::kFailed;
    }
    if (!requeue) {
      grid.failed += run.count;
      return;
    }
    grid.next = std::min(grid.next, run.first);
    queue_.Add(run.load);
  }

  // Stopping: no demand is sent any more; the loads still queued are handed back.
  std::deque<Ref> Stop() {
    queue_.ClearDemands();
    return queue_.TakeLoads();
  }
  bool idle() const { return in_flight_ == 0 && !pump_.pumping; }
  unsigned in_flight() const { return in_flight_; }
  unsigned window() const { return window_; }
  bool has_demands() const { return queue_.HasDemands(); }

 private:
  static LoaderOptions Clamped(LoaderOptions o) {
    o.block = std::max<size_t>(o.block, 1);
    o.window_most = std::max(1u, o.window_most);
    o.floor = std::clamp(o.floor, 1u, o.window_most);
    return o;
  }

  // Demand first, past the window; then prefetch runs of the oldest loads.
  std::vector<BlobRead> NextReads() {
    std::vector<BlobRead> reads;
    queue_.TakeDemands(
        [&] { return options_.demand_most == 0 || demand_in_flight_ < options_.demand_most; },
        [&](const Run& run) {
          reads.push_back(ReadOf(run, true));
          if (counts_.demand_reads) ++*counts_.demand_reads;
        });
    const size_t piece = options_.piece ? options_.piece : SIZE_MAX;
    const auto most = static_cast<uint32_t>(
        std::clamp<size_t>(piece / options_.block, 1, std::numeric_limits<uint32_t>::max()));
    while (in_flight_ < window_ || in_flight_ - demand_in_flight_ < options_.floor) {
      const Run run = queue_.NextPrefetch(most);
      if (!run.load) break;
      reads.push_back(ReadOf(run, false));
    }
    return reads;
  }

  uint64_t RunLength(const Run& run) const {
    const uint64_t at = uint64_t{run.first} * options_.block;
    return std::min<uint64_t>(uint64_t{run.count} * options_.block,
                              run.load->grid.span.length - at);
  }

  // The read of `run`, its blocks marked in flight.
  BlobRead ReadOf(const Run& run, bool demand) {
    BlockGrid& grid = run.load->grid;
    grid.Send(run.first, run.count);
    ++in_flight_;
    if (demand) ++demand_in_flight_;
    Run sent = run;
    sent.sent = std::chrono::steady_clock::now();
    const uint64_t at = uint64_t{run.first} * options_.block;
    BlobRead read;
    read.blob = grid.span.blob;
    read.offset = grid.span.start + at;
    read.length = RunLength(run);
    read.buffer = grid.span.buffer + at;
    read.urgent = demand;
    read.done = [this, sent, demand](Result<size_t> got) { done_(sent, demand, std::move(got)); };
    return read;
  }

  void Adapt(bool demand, std::chrono::steady_clock::duration latency) {
    if (!options_.adapt) return;
    if (!demand) {
      if (demand_in_flight_ == 0 && !queue_.HasDemands() && window_ < options_.window_most) {
        ++window_;
      }
      return;
    }
    const double ms = std::chrono::duration<double, std::milli>(latency).count();
    least_demand_ms_ = least_demand_ms_ > 0 ? std::min(ms, least_demand_ms_ * 1.05) : ms;
    if (ms > 2 * least_demand_ms_) {
      window_ = std::max(options_.floor, window_ * 3 / 4);
    } else if (window_ < options_.window_most) {
      ++window_;
    }
  }

  const LoaderOptions options_;
  const LoaderCounts counts_;
  const Done done_;
  BlockQueue<Load> queue_;  // demanded blocks, then loads with blocks queued, oldest first
  ReadPump pump_;
  unsigned in_flight_ = 0;  // demand and prefetch requests
  unsigned demand_in_flight_ = 0;
  unsigned window_;             // prefetch's window (adapted with options_.adapt)
  double least_demand_ms_ = 0;  // the least latency of a demand read seen, creeping up
};

}  // namespace gpufs
