// How a file is read when its group is not pinned (the budget is full, or the policy keeps
// what it has): with its whole group, read ahead into the kernel's page cache, where the
// group's other files find it later in the epoch; or alone. The budget bounds what gpufs
// pins, not what the node may cache: a dataset between the budget and the node's memory is
// still read a group at a time, at the device's bandwidth; only where the page cache would
// let a group go before most of its files are asked for is each file read alone.
//
// The choice weighs what a file costs each way in bytes moved, a request counting as the
// bytes the device moves in its time (S, source/device_shape.h):
//   alone:       S + m
//   its group:   (G + ceil(G / P) S) / (1 + (n - 1) k)
// m: a file's mean size; G, n: a group's mean bytes and files; P: the largest request; k:
// the share of a group's other files read while the page cache still holds it. k is
// predicted at mount from the memory beside the budget against the dataset beyond it, then
// measured: a file of a group read ahead this epoch is found in the page cache or not
// (preadv2 RWF_NOWAIT, which never waits on the device).
//
// A group is read ahead in large pages (source/page_cache_ahead.h), the part holding the
// asked-for file first; its reader waits for that part, and readers of its other files
// for the whole group, as readers of a pinned load do: a file read alone meanwhile would
// split the large pages, and the device would take twice the requests.
//
// One copy: each file's pages leave the page cache once it is served (the kernel keeps it
// as the served file from then on), so the node holds the dataset once, not twice.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cache/cached_bytes.h"
#include "cache/member_reads.h"
#include "dataset/catalog.h"
#include "source/blob_source.h"
#include "source/figure.h"

namespace gpufs {

// --miss-reads, spelled here once for the option, the stats and the docs.
namespace miss_read_name {
inline constexpr std::string_view kAuto = "auto";
inline constexpr std::string_view kGroups = "groups";
inline constexpr std::string_view kMembers = "members";
inline constexpr std::string_view kAll[] = {kAuto, kGroups, kMembers};
}  // namespace miss_read_name

// The keys of MissReads::Stats() (the cache's "miss_reads" object) and their figures.
namespace miss_read_stat {
inline constexpr const char* kMissReads = "miss_reads";
inline constexpr const char* kMode = "mode";                // --miss-reads
inline constexpr const char* kChoice = "choice";            // groups or members, now
inline constexpr const char* kDevice = "device";            // how the source's shape was known
inline constexpr const char* kBreakEven = "request_bytes";  // S
inline constexpr const char* kKeptPredicted = "kept_predicted";
inline constexpr const char* kKeptMeasured = "kept_measured";  // null until measured
inline constexpr const char* kCostAlone = "file_cost_alone_bytes";
inline constexpr const char* kCostGroup = "file_cost_group_bytes";
inline constexpr const char* kGroupsAhead = "groups_read_ahead";
inline constexpr const char* kBytesAhead = "bytes_read_ahead";
inline constexpr const char* kPageCacheHits = "page_cache_hits";
inline constexpr const char* kPageCacheMisses = "page_cache_misses";

// What MissReads counts, each under the key of its row below.
struct Counters {
  std::atomic<uint64_t> groups_ahead{0}, bytes_ahead{0}, page_cache_hits{0}, page_cache_misses{0};
};

// Its counters: its Stats() and /metrics.
inline constexpr CounterFigure<Counters> kCounterFigures[] = {
    {{kGroupsAhead, "miss_groups_read_ahead_total", kCounter,
      "Groups not pinned read ahead into the kernel's page cache."},
     &CountOf<&Counters::groups_ahead>},
    {{kBytesAhead, "miss_bytes_read_ahead_total", kCounter,
      "Bytes of groups read ahead into the kernel's page cache."},
     &CountOf<&Counters::bytes_ahead>},
    {{kPageCacheHits, "miss_page_cache_hits_total", kCounter,
      "Files of a group read ahead found in the page cache."},
     &CountOf<&Counters::page_cache_hits>},
    {{kPageCacheMisses, "miss_page_cache_misses_total", kCounter,
      "Files of a group read ahead that the page cache had let go."},
     &CountOf<&Counters::page_cache_misses>}};
}  // namespace miss_read_stat

// A dataset's shape and its device's, for the costs above.
struct MissReadShape {
  double file_bytes = 0;       // m
  double group_bytes = 0;      // G
  double files_per_group = 1;  // n
  double part_bytes = 0;       // P (0: a group is one request)
  double request_bytes = 0;    // S
};

struct MissReadCost {
  double alone = 0;  // bytes moved per file read alone
  double group = 0;  // per file of a group read ahead, `kept` of the others read from it
};

MissReadCost CostOf(const MissReadShape& shape, double kept);

// The share of a group's files read while the page cache holds it, predicted: what the
// page cache can hold of the dataset beyond the budget (1 when all of it).
double PredictedKept(uint64_t dataset_bytes, uint64_t budget_bytes, uint64_t page_cache_bytes);

class MissReads {
 public:
  struct Config {
    std::string_view mode = miss_read_name::kAuto;
    uint64_t budget_bytes = 0;      // the pinned cache's
    uint64_t page_cache_bytes = 0;  // memory the kernel may cache beside the budget
  };
  // `catalog` and `source` must outlive it. Thread-safe.
  MissReads(const Catalog& catalog, BlobSource& source, Config config);
  ~MissReads();
  MissReads(const MissReads&) = delete;
  MissReads& operator=(const MissReads&) = delete;

  // Up to `size` bytes of `file` at `offset`, read for this reply alone (ReadMemberBytes):
  // from the page cache where it holds them, else after its group is read ahead into it
  // (once an epoch, while groups are the choice), else alone. `epoch`: the cache's.
  Result<CachedBytes> Read(NodeId file, uint64_t offset, size_t size, MemberChecks* checks,
                           uint32_t epoch);
  bool groups() const { return groups_.load(std::memory_order_relaxed); }
  nlohmann::json Stats() const;

 private:
  Status ReadThrough(NodeId file, uint32_t epoch, uint32_t blob, uint64_t at, size_t length,
                     char* buffer);
  bool Claim(uint32_t group, uint32_t seen, uint32_t epoch);
  bool ReadAhead(uint32_t group, uint32_t blob, uint64_t first);
  void AwaitReadAhead(uint32_t group);
  double Kept() const;
  void Decide();

  const Catalog& catalog_;
  BlobSource& source_;
  const std::string_view mode_;
  const std::optional<DeviceShape> device_;
  MissReadShape shape_;
  double kept_predicted_ = 1;
  // Per group: the epoch (+1) it was last read ahead in.
  std::unique_ptr<std::atomic<uint32_t>[]> ahead_epoch_;
  // Per group: its read ahead is on its way; readers wait on read_ for it.
  std::unique_ptr<std::atomic<bool>[]> reading_;
  std::mutex reading_mu_;
  std::condition_variable read_;
  unsigned outstanding_ = 0;  // read-aheads not done; guarded by reading_mu_
  std::atomic<bool> groups_{false};
  miss_read_stat::Counters counters_;
};

}  // namespace gpufs
