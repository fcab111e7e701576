// Staging: groups the pinned tier has no room for, fetched whole into the disk tier at the
// link's speed.
//
// Once the pinned budget is full of groups whose last members are still to come (in a
// random epoch, a group's last member comes near the end), every read misses the pinned
// tier. Each such miss stages its group: the group is fetched whole through the source's
// asynchronous path (BlobSource::Submit, the transfer engine the group loads use), into a
// pooled buffer, and written to the disk tier by a small pool of writers. What is bounded:
//
// - Bytes in flight: the buffers of groups being fetched or written never pass `budget`;
//   further groups wait in a queue, first come, and a group is never fetched twice at once.
// - Requests: prefetch reads of `piece` bytes, at most `reads_in_flight` at once, oldest
//   group first, so the source's queue holds about what keeps it busy.
// - Demand first: a reader who wants a member of a group being staged does not wait for the
//   group: the member's blocks (`block` bytes, the source's demand size) are sent at once,
//   urgent, beside the prefetch window (or joined where already in flight), and the reader is
//   served from the staging buffer as soon as they land.
// - Failures: a read that fails fails the group's staging only; readers who waited on it
//   read their member from the source instead (slower, never wrong bytes), and a later miss
//   stages the group again once a back-off has passed (retry_after, doubling with each
//   failure in a row). A group whose bytes fail the check (its blob's checksum) is not
//   kept, and backs off the same way.
// - A full tier: when the tier says it has no room (DiskTier::Full), groups are not staged;
//   the misses are read alone, as without a tier, and nothing thrashes.
//
// Buffers are taken from a pool (aligned, never zero-filled: every byte written to the tier
// came from the source, or is the zeroed padding past the group's end).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/load/group_loader.h"
#include "cache/tier/disk_tier.h"
#include "source/blob_source.h"
#include "source/figure.h"

namespace gpufs {

// The keys of the stager's Stats(), spelled here once.
namespace staging_stat {
inline constexpr const char* kBudget = "budget_bytes";       // bytes in flight at most
inline constexpr const char* kInFlight = "in_flight_bytes";  // fetched or written now
inline constexpr const char* kQueued = "queued";             // groups waiting for room
inline constexpr const char* kStaged = "staged";             // groups written to the tier
inline constexpr const char* kFetchedBytes = "fetched_bytes";
inline constexpr const char* kDemandReads = "demand_reads";  // urgent reads for a reader
inline constexpr const char* kServed = "served";             // members served while staging
inline constexpr const char* kFailed = "failed";             // stagings that failed
inline constexpr const char* kNotKept = "not_kept";          // fetched, but not written
inline constexpr const char* kFullSkips = "full_skips";      // not staged: the tier was full

// What the stager counts, each under the key of its row below.
struct Counters {
  std::atomic<uint64_t> staged{0}, fetched_bytes{0}, demand_reads{0}, served{0}, failed{0},
      not_kept{0}, full_skips{0};
};

// The stager's counters, in its Stats() only: /metrics has the cache's fills (tier_stat).
inline constexpr CounterFigure<Counters> kCounterFigures[] = {
    {{kStaged}, &CountOf<&Counters::staged>},
    {{kFetchedBytes}, &CountOf<&Counters::fetched_bytes>},
    {{kDemandReads}, &CountOf<&Counters::demand_reads>},
    {{kServed}, &CountOf<&Counters::served>},
    {{kFailed}, &CountOf<&Counters::failed>},
    {{kNotKept}, &CountOf<&Counters::not_kept>},
    {{kFullSkips}, &CountOf<&Counters::full_skips>}};
}  // namespace staging_stat

// The byte range of a group that staging fetches and keeps, and the name of its copy.
struct StagedSpan {
  uint32_t blob = 0;
  uint64_t start = 0;  // blob offset, aligned as the source wants
  size_t length = 0;   // the copy's payload
  size_t need = 0;     // bytes of it the group needs (the rest may lie past the blob's end)
  std::string name;    // empty: never kept
};

struct StagingOptions {
  size_t budget = 128 << 20;     // bytes of groups fetched or being written at once
  size_t piece = 8 << 20;        // bytes per prefetch read
  size_t block = 256 << 10;      // a reader's demand read rounds to this; divides piece
  unsigned reads_in_flight = 8;  // prefetch reads at once; demand reads go beside them
  unsigned writers = 2;          // threads writing staged groups to the tier
  // After a failed staging the group is not staged again for this long, doubled with each
  // failure in a row (up to 64 times): a bad blob costs a fetch now and then, never a loop.
  std::chrono::milliseconds retry_after{1000};
};

class TierStager {
 public:
  // Whether the bytes of a group's span (`need` of them) are the dataset's. Thread-safe.
  using Check = std::function<bool(uint32_t group, const char* span)>;

  // `source` and `tier` must outlive the stager. `fetched`, when given, counts the bytes
  // read from the source. Thread-safe.
  TierStager(BlobSource& source, DiskTier& tier, std::vector<StagedSpan> spans,
             StagingOptions options, Check check, std::atomic<uint64_t>* fetched = nullptr);
  // Drops queued groups, waits for the reads in flight and the writes.
  ~TierStager();
  TierStager(const TierStager&) = delete;
  TierStager& operator=(const TierStager&) = delete;

  // Queues `group` to be fetched and kept, unless it is queued or staging already, failed
  // lately (retry_after), has no name, or the tier is full. True when it is (now) staging
  // or queued.
  bool Stage(uint32_t group);
  // While `group` is staging: copies bytes [offset, offset + size) of its span into `out`
  // as soon as they have landed, sending their blocks first. False when the group is not
  // staging, or its bytes cannot be had from the staging (the caller reads elsewhere).
  bool Read(uint32_t group, uint64_t offset, size_t size, char* out);
  // Whether `group` is queued or being staged now.
  bool Staging(uint32_t group) const;
  nlohmann::json Stats() const;

 private:
  struct Buffer;
  struct Job;
  using JobRef = std::shared_ptr<Job>;
  using Run = BlockRun<Job>;

  void Pump(std::unique_lock<std::mutex>& lock);
  void StartJobs();
  void OnRead(const Run& run, bool demand, Result<size_t> got);
  void Settle(const JobRef& job, std::unique_lock<std::mutex>& lock);
  void Release(const JobRef& job);
  void Failed(uint32_t group);
  void WriterLoop();
  char* TakeBuffer(size_t bytes, size_t* capacity);
  void GiveBuffer(char* buffer, size_t capacity);

  BlobSource& source_;
  DiskTier& tier_;
  const std::vector<StagedSpan> spans_;
  const StagingOptions options_;
  const Check check_;
  std::atomic<uint64_t>* const fetched_;

  // Lock order: mu_ only; the tier and the source are called outside it.
  mutable std::mutex mu_;
  std::condition_variable changed_;  // a block landed, a job ended, a write was queued
  std::vector<JobRef> jobs_;         // by group: staging now (fetching or writing)
  std::vector<uint8_t> failures_;    // failed stagings in a row, by group
  // When each group may be staged again after a failure, by group.
  std::vector<std::chrono::steady_clock::time_point> retry_at_;
  std::deque<uint32_t> queued_;  // groups waiting for room in the budget
  std::vector<bool> is_queued_;  // by group
  std::deque<JobRef> writes_;    // jobs landed and checked, to be written
  // Pooled buffers, (pointer, capacity); at most a budget's worth are kept.
  std::vector<std::pair<char*, size_t>> pool_;
  size_t pooled_bytes_ = 0;
  size_t in_flight_bytes_ = 0;  // buffers of jobs fetching or writing
  unsigned writes_running_ = 0;
  bool stop_ = false;

  staging_stat::Counters counters_;
  // Blocks a reader waits on, then jobs' blocks, oldest first, within the prefetch window
  // (reads_in_flight; demand beside it, unbounded). Guarded by mu_.
  GroupLoader<Job> loader_;
  std::vector<std::thread> writers_;  // last: they use all of the above
};

}  // namespace gpufs
