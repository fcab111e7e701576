// Is the trainer waiting on storage? The stall account sees every read the group cache
// serves and says, per epoch and live, where it was served from and how long readers
// waited for it.
//
// A read is served from memory when its group was ready (no wait), or else from the tier
// it waited on: the disk tier, or the source (split into reads that waited on a group
// load and members read alone, whose costs per byte differ by orders of magnitude on a
// store: a whole group streams at the link's speed, a member alone pays a round trip).
// Reads the kernel's page cache answers never reach the daemon; an epoch that ends counts
// the files it never asked for as the page cache's (or not read at all).
//
// The fetch stall is the share of the epoch's wall time during which at least one reader
// waited on storage: the union of the waits, not their sum, which is what the loader
// lost. The demand rate is the bytes served over the rest of the time: what the loader
// took while it was not waiting.
//
// The hit ratio is the share of the bytes served that the source did not send for this
// epoch: a read is the source's when it went there (a group load, a member alone), or when
// its group was fetched whole from the source (loaded, prefetched or staged into the disk
// tier) during this epoch, or between the last and this one. Hits and misses are counted
// apart, each read in one of them, so their ratio lies in [0, 1] however the counters are
// read. Bytes the source sent set against bytes served would not: whole groups and
// prefetch run ahead of the reads, so a cold epoch's first files would read far below 0.
//
// An epoch is a pass over the dataset: it ends with the last of its files read, or, where
// the kernel's page cache answered some (they never reach the daemon), when a file is
// read again once at least half of the dataset's files were (the rule consume-once
// follows, policy.h). An epoch's clock starts at its first read, so a trainer's pause
// between epochs (validation, a checkpoint) is no epoch's time. Counters are cumulative;
// an epoch is the difference of two snapshots, so nothing is lost when one ends while
// reads go on.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include <nlohmann/json.hpp>

#include "cache/account/striped_counter.h"
#include "source/figure.h"

namespace gpufs {

// The keys of the stall account's stats, spelled here once for user.gpufs.stats, the
// control socket, gpufs-stat and /metrics.
namespace stall_stat {
inline constexpr const char* kStall = "stall";      // the object under the cache's stats
inline constexpr const char* kEpoch = "epoch";      // the epoch in progress (from 1)
inline constexpr const char* kCurrent = "current";  // the epoch in progress, so far
inline constexpr const char* kLast = "last";        // the last epoch that ended (or null)
inline constexpr const char* kTotals = "totals";    // since the mount
inline constexpr const char* kWallS = "wall_s";
inline constexpr const char* kStalledS = "stalled_s";
inline constexpr const char* kStallFraction = "stall_fraction";
inline constexpr const char* kDemandMbPerS = "demand_mb_per_s";
inline constexpr const char* kFiles = "files";                 // files read to their end
inline constexpr const char* kNotRequested = "not_requested";  // ended epochs: page cache
inline constexpr const char* kBytesServed = "bytes_served";
// Of bytes_served, what the source did not send for the epoch, and what it did (see above).
inline constexpr const char* kHitBytes = "hit_bytes";
inline constexpr const char* kMissBytes = "miss_bytes";
// hit_bytes / (hit_bytes + miss_bytes); null when nothing was served.
inline constexpr const char* kHitRatio = "hit_ratio";
inline constexpr const char* kFrom = "from";  // an object per ServedFrom
inline constexpr const char* kReads = "reads";
inline constexpr const char* kBytes = "bytes";
inline constexpr const char* kWaitS = "wait_s";           // the sum of its reads' waits
inline constexpr const char* kFetched = "fetched_bytes";  // what each tier read to serve
// The most readers waiting at once in the epoch: how many read in parallel, at least.
inline constexpr const char* kPeakWaiting = "readers_waiting_peak";

// What /metrics exports of them: since the mount, by where reads were served from
// (labelled from="memory", ...); the seconds stalled since the mount; and the epoch's
// gauges, for the epoch in progress and the last one that ended (labelled epoch=...).
inline constexpr Figure kFromFigures[] = {
    {kReads, "stall_reads_total", kCounter, "Reads served, by where from."},
    {kBytes, "stall_read_bytes_total", kCounter, "Bytes served, by where from."},
    {kWaitS, "stall_wait_seconds_total", kCounter, "Seconds readers waited, by what on."},
    {kFetched, "stall_fetched_bytes_total", kCounter, "Bytes each tier read to serve reads."}};
inline constexpr Figure kStalledFigure = {kStalledS, "stall_stalled_seconds_total", kCounter,
                                          "Seconds at least one reader waited on storage."};
inline constexpr Figure kEpochFigures[] = {
    {kStallFraction, "stall_fraction", kGauge,
     "Share of the epoch's time a reader waited on storage."},
    {kDemandMbPerS, "stall_demand_mb_per_s", kGauge, "MB/s the readers took while not waiting."},
    {kHitRatio, "stall_hit_ratio", kGauge,
     "Share of the epoch's bytes served that the source did not send for it."}};
}  // namespace stall_stat

enum class ServedFrom : uint8_t { kMemory, kDiskTier, kSourceGroup, kSourceMember };
inline constexpr size_t kServedFromCount = 4;
// The stats' names of ServedFrom, in its order.
inline constexpr std::array<const char*, kServedFromCount> kServedFromNames = {
    "memory", "disk_tier", "source_group", "source_member"};

// Cumulative counts, and one epoch as the difference of two of them.
struct StallTotals {
  std::array<uint64_t, kServedFromCount> reads{};
  std::array<uint64_t, kServedFromCount> bytes{};
  std::array<uint64_t, kServedFromCount> wait_ns{};
  std::array<uint64_t, kServedFromCount> fetched{};  // bytes each tier read (memory: 0)
  uint64_t hit_bytes = 0;   // bytes served that the source did not send for their epoch
  uint64_t miss_bytes = 0;  // and those it did
  uint64_t stalled_ns = 0;
  uint64_t files = 0;  // files read to their end
  uint64_t at_ns = 0;  // when the snapshot was taken (steady clock)
  StallTotals operator-(const StallTotals& since) const;
  uint64_t bytes_served() const;
};

// One ended (or running) epoch.
struct StallEpoch {
  uint32_t epoch = 0;
  StallTotals delta;            // at_ns: its wall time
  uint64_t distinct_files = 0;  // files read to their end at least once
  uint64_t not_requested = 0;   // ended epochs: files never asked for
  uint32_t peak_waiting = 0;    // the most readers waiting at once
  double StallFraction() const;
  double DemandMbPerS() const;
  std::optional<double> HitRatio() const;  // none: nothing served
  nlohmann::json Json(bool ended) const;
};

class StallAccount {
 public:
  // What the tiers read since the mount, by ServedFrom (memory: 0); asked at snapshots.
  using FetchedTotals = std::function<std::array<uint64_t, kServedFromCount>()>;
  // Nanoseconds of a steady clock; tests pass their own.
  using Clock = std::function<uint64_t()>;
  StallAccount(size_t file_count, size_t group_count, FetchedTotals fetched,
               Clock clock = SteadyNs);

  // A read of `bytes` of group `group` was served from `from`, after waiting `wait_ns`
  // (0: none). The memory case costs two striped adds; thread-safe.
  void Served(ServedFrom from, uint64_t bytes, uint64_t wait_ns, uint32_t group);
  // The source is fetching `group` whole (a load into memory, a staging into the disk
  // tier): its reads are misses until the epoch in progress (or the next, between
  // epochs) ends. Lock-free.
  void Fetching(uint32_t group);
  // A reader begins / ends waiting on storage; thread-safe, slow path only.
  void BeginWait();
  void EndWait();
  // File `file` (an index into the file table) was read to its end; whether that ended
  // the epoch, and how (the caller moves its access trace on).
  enum EpochEvent { kSame, kEndedWith, kBegan };  // kBegan: it is the next epoch's first
  EpochEvent FileDone(uint32_t file);

  uint32_t epoch() const;
  std::optional<StallEpoch> Last() const;
  StallEpoch Current() const;
  nlohmann::json Stats() const;

  uint64_t Now() const { return clock_(); }
  static uint64_t SteadyNs();

 private:
  StallTotals Snapshot() const;
  bool FetchedThisEpoch(uint32_t group) const;
  void Start();
  void EndEpoch(bool next);

  const size_t file_count_;
  const FetchedTotals fetched_;
  const Clock clock_;
  StripedCounter memory_reads_;
  StripedCounter memory_hit_bytes_;
  StripedCounter memory_miss_bytes_;  // of groups the source fetched this epoch
  std::array<std::atomic<uint64_t>, kServedFromCount> reads_{};
  std::array<std::atomic<uint64_t>, kServedFromCount> bytes_{};
  std::array<std::atomic<uint64_t>, kServedFromCount> wait_ns_{};
  std::atomic<uint64_t> hit_bytes_{0};   // of the reads that are not memory's
  std::atomic<uint64_t> miss_bytes_{0};  // likewise
  // By group: the epoch_ in which the source last fetched it whole (0: never).
  std::unique_ptr<std::atomic<uint32_t>[]> fetched_in_;
  StripedCounter files_;
  std::atomic<uint64_t> distinct_{0};              // files of the epoch in progress
  std::unique_ptr<std::atomic<uint64_t>[]> seen_;  // a bit per file: read this epoch

  mutable std::mutex mu_;           // guards the fields below; taken after the cache's mu_
  uint32_t waiting_ = 0;            // readers waiting on storage now
  uint32_t peak_waiting_ = 0;       // the most at once in the epoch in progress
  uint64_t wait_since_ns_ = 0;      // when waiting_ last left 0
  uint64_t stalled_ns_ = 0;         // closed intervals with waiting_ > 0
  std::atomic<uint32_t> epoch_{1};  // written under mu_, read anywhere
  StallTotals epoch_start_;
  std::atomic<bool> running_{false};  // an epoch is in progress; written under mu_
  std::optional<StallEpoch> last_;
};

}  // namespace gpufs

namespace gpufs {

// One read's wait, timed from its first block on storage to its bytes; a read that never
// waited is counted as memory's. A read that fails still ends its wait (it stalled its
// reader) but counts nowhere else. Not thread-safe: one per read.
class StallWait {
 public:
  explicit StallWait(StallAccount& account) : account_(account) {}
  StallWait(const StallWait&) = delete;
  StallWait& operator=(const StallWait&) = delete;
  ~StallWait() {
    if (since_) account_.EndWait();
  }
  void Begin() {
    if (since_) return;
    since_ = account_.Now();
    account_.BeginWait();
  }
  void Served(ServedFrom from, uint64_t bytes, uint32_t group) {
    if (!since_) return account_.Served(ServedFrom::kMemory, bytes, 0, group);
    const uint64_t waited = std::max<uint64_t>(1, account_.Now() - since_);
    account_.EndWait();
    since_ = 0;
    account_.Served(from, bytes, waited, group);
  }

 private:
  StallAccount& account_;
  uint64_t since_ = 0;
};

}  // namespace gpufs
