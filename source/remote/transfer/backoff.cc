#include "source/remote/transfer/backoff.h"

#include <algorithm>

namespace gpufs::remote {

std::chrono::milliseconds BackoffDelay(unsigned retry, std::mt19937_64& random,
                                       const BackoffPolicy& policy) {
  // Past 2^20 times the base every bound is the cap; stopping there keeps the shift defined.
  const auto bound =
      std::min<int64_t>(policy.cap.count(), policy.base.count() << std::min(retry, 20u));
  std::uniform_int_distribution<int64_t> draw(0, std::max<int64_t>(bound, 0));
  return std::chrono::milliseconds(draw(random));
}

std::optional<std::chrono::milliseconds> RetryDelay(unsigned retry,
                                                    std::chrono::milliseconds elapsed,
                                                    std::chrono::milliseconds deadline,
                                                    std::mt19937_64& random,
                                                    const BackoffPolicy& policy) {
  if (elapsed >= deadline) return std::nullopt;
  return std::min(BackoffDelay(retry, random, policy), deadline - elapsed);
}

}  // namespace gpufs::remote
