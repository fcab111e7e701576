#include "cli/options/kernel_limits.h"

#include <unistd.h>

#include <algorithm>

namespace gpufs {

uint64_t PhysicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
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
