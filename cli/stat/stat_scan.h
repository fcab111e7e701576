// gpufs-stat's measurement: for each path, its files and folders and how many of their
// pages each tier holds. The daemon answers for its tiers and names the files the kernel
// may hold; those are measured here (cache/page_cache.h) on a few threads. A path outside
// any gpufs mount is walked and measured in the kernel tier alone, as vmtouch would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "fs/residency.h"

namespace gpufs {

// Index into the per-tier vectors below.
enum Tier : size_t { kKernelTier = 0, kPinnedTier = 1, kDiskTier = 2 };

// Each tier's name in the summary lines, and its key in the kv and JSON forms, by Tier.
struct TierName {
  const char* label;
  const char* key;
};
inline constexpr TierName kTierNames[] = {
    {"kernel page cache", "Kernel"},
    {"gpufsd pinned cache", "Pinned"},
    {"gpufsd disk cache", "Disk"},
};

struct FileStat {
  std::string path;
  uint64_t pages = 0;
  std::vector<uint64_t> resident;         // pages per tier
  std::vector<std::vector<bool>> charts;  // each page per tier, with --verbose
};

struct BucketStat {
  std::string name;
  uint64_t files = 0;
  uint64_t pages = 0;
  std::vector<uint64_t> resident;
};

struct StatReport {
  std::vector<std::string> tiers;  // names, in Tier order
  uint64_t files = 0;
  uint64_t dirs = 0;
  uint64_t pages = 0;
  std::vector<uint64_t> resident;   // per tier
  std::vector<FileStat> listed;     // with --verbose
  std::vector<BucketStat> buckets;  // with --by
  std::vector<std::string> notes;   // told to the user on stderr
  double elapsed_s = 0;
};

struct StatOptions {
  bool verbose = false;  // each file, with each page's state
  GroupBy by = GroupBy::kNone;
  unsigned threads = 4;  // measuring the kernel tier
  double timeout_s = 5;  // for each answer of a daemon
};

Result<StatReport> Measure(const std::vector<std::string>& paths, const StatOptions& options);

// The share of the pages under `path` the kernel's page cache holds (0 when it has none).
Result<double> KernelShare(const std::string& path, const StatOptions& options);

}  // namespace gpufs
