#include "cli/kernel_limits.h"

#include <algorithm>

namespace gpufs {

void ChooseKernelLimits(MountArgs& args, uint64_t dataset_bytes, unsigned cores) {
  if (args.max_threads == 0) args.max_threads = std::max(16u, 4 * std::max(cores, 1u));
  CachePolicy& cache = args.cache;
  cache.max_background = args.max_background ? args.max_background : args.max_threads;
  cache.congestion_threshold = std::max(1u, cache.max_background * 3 / 4);
  if (args.streaming == "auto") {
    cache.direct_io = args.cache_bytes > 0 && dataset_bytes > args.cache_bytes;
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
