// The group cache's side of sizing advice: the dataset's shape, the epoch and its trace
// handed to the model (advice.h).
#include "cache/account/advice.h"
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
  return gpufs::Advise(shape, in);
}

}  // namespace gpufs
