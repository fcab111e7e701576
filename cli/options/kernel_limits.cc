#include "cli/options/kernel_limits.h"

#include <unistd.h>

#include <algorithm>
#include <optional>

#include "source/cgroup_limits.h"

namespace gpufs {

uint64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

uint64_t MemoryLimit() {
  const uint64_t physical = PhysicalMemory();
  const std::optional<uint64_t> cgroup = CgroupMemoryLimit();
  if (!cgroup) return physical;
  return physical ? std::min(physical, *cgroup) : *cgroup;
}

uint64_t PageCacheRoom(uint64_t budget) {
  uint64_t available = MemoryLimit();
  if (const uint64_t now = MemoryAvailable()) available = std::min(available, now);
  return available > budget ? available - budget : 0;
}

void SizeDefaultBudget(MountArgs& args, uint64_t dataset_fill) {
  if (args.cache_bytes != MountArgs::DefaultCacheBytes()) return;  // given
  args.cache_bytes = std::min(args.cache_bytes, std::max<uint64_t>(dataset_fill, 1 << 20));
}

void ChooseKernelLimits(MountArgs& args, uint64_t dataset_bytes, unsigned cores,
                        uint64_t memory_bytes) {
  if (args.max_threads == 0) args.max_threads = std::max(16u, 4 * std::max(cores, 1u));
  CachePolicy& cache = args.cache;
  cache.max_background = args.max_background ? args.max_background : args.max_threads;
  cache.congestion_threshold = std::max(1u, cache.max_background * 3 / 4);
  if (args.streaming == "auto") {
    const uint64_t beside = memory_bytes > args.cache_bytes ? memory_bytes - args.cache_bytes : 0;
    cache.direct_io =
        args.cache_bytes > 0 && dataset_bytes > args.cache_bytes && dataset_bytes > beside;
  } else {
    cache.direct_io = args.streaming == "on";
  }
}

nlohmann::json KernelLimitsJson(const MountArgs& args) {
  const CachePolicy& cache = args.cache;
  return {{"threads", args.max_threads},
          {"max_background", cache.max_background},
          {"congestion_threshold", cache.congestion_threshold},
          {"readdirplus", std::string(DirPlusName(cache.readdirplus))},
          {"streaming", cache.direct_io}};
}

}  // namespace gpufs
