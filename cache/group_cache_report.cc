// What the group cache reports (see group_cache.h): its stats, which groups it holds, and
// its side of sizing advice: the dataset's shape, the epoch and its trace handed to the
// model (advice.h).
#include "cache/account/advice.h"
#include "cache/cache_stat.h"
#include "cache/group_cache.h"

namespace gpufs {

nlohmann::json GroupCache::Advise(uint64_t free_memory, uint64_t disk_available) const {
  // The shape is built for the call and freed after it: 16 bytes a file, which the
  // daemon does not keep between calls.
  WhatIfShape shape;
  shape.file_group.reserve(catalog_.file_count());
  shape.file_bytes.reserve(catalog_.file_count());
  for (uint32_t i = 0; i < catalog_.file_count(); ++i) {
    const FileExtent f = catalog_.Extent(catalog_.FileNode(i));
    shape.file_group.push_back(f.group);
    shape.file_bytes.push_back(f.size);
  }
  AdviceInput in;
  for (uint32_t g = 0; g < catalog_.group_count(); ++g) {
    uint64_t start = 0;
    shape.group_bytes.push_back(SpanOf(g, &start));
    in.dataset_bytes += shape.group_bytes.back();
  }
  const std::optional<StallEpoch> last = stall_.Last();
  in.ended = last.has_value();
  in.epoch = last ? *last : stall_.Current();
  in.accesses = last ? trace_.Last() : trace_.Current();
  in.rate = trace_.rate();
  in.policy = std::string(policy_->name());
  in.cache_bytes = arena_.capacity();
  in.tier_bytes = tier_ ? tier_->Room() : 0;
  in.memory_available = free_memory + arena_.capacity();  // the arena counts as used
  in.disk_available = tier_ ? tier_->OnDisk() : disk_available;
  nlohmann::json advice = gpufs::Advise(shape, in);
  advice[miss_read_stat::kMissReads] = miss_.Stats();
  return advice;
}

bool GroupCache::Resident(uint32_t group) const {
  std::lock_guard lock(mu_);
  return entries_[group] && entries_[group]->ready;
}

std::vector<bool> GroupCache::ResidentGroups() const {
  std::lock_guard lock(mu_);
  std::vector<bool> resident(entries_.size());
  for (size_t g = 0; g < entries_.size(); ++g) resident[g] = entries_[g] && entries_[g]->ready;
  return resident;
}

nlohmann::json GroupCache::Stats() const {
  using namespace cache_stat;
  const auto& c = counters_;
  nlohmann::json j;
  uint64_t cached_groups = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& e : entries_) cached_groups += e && e->ready;
    j[kPrefetchInFlight] = prefetch_loads_;
    j[kPrefetchWindow] = loader_.window();
  }
  const double served = static_cast<double>(c.bytes_served.load());
  // One definition of an epoch for every view: the stall account's (stall_account.h),
  // which the -w line, /metrics and --advise all read; the policy's own detection only
  // steers what it keeps.
  const StallEpoch current = stall_.Current();
  j[kEpoch] = current.epoch;
  j[kEpochFilesServed] = current.distinct_files;
  j[kPolicy] = std::string(policy_->name());
  j[kBudget] = arena_.capacity();
  j[kCachedBytes] = arena_.used();
  j[kCachedGroups] = cached_groups;
  j[kGroups] = catalog_.group_count();
  j[kArenaLocked] = arena_.locked();
  j[kArenaPrefaulted] = arena_.prefaulted();
  j[kArenaTaken] = arena_.taken();
  j[kHugePages] = arena_.huge_pages();
  PutCounts(j, kCounterFigures, c);  // each read once: the striped ones sum their stripes
  if (tier_) j[kTier] = tier_->Stats();
  j[miss_read_stat::kMissReads] = miss_.Stats();
  j[stall_stat::kStall] = stall_.Stats();
  j[kReadAmplification] = served > 0 ? static_cast<double>(c.bytes_from_source) / served : 0.0;
  return j;
}

}  // namespace gpufs
