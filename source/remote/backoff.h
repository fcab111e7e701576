// How long to wait before a retry: exponential backoff with full jitter (a uniform draw
// below the exponential bound), so clients that failed together do not return together.
#pragma once

#include <chrono>
#include <random>

namespace gpufs::remote {

struct BackoffPolicy {
  std::chrono::milliseconds base{50};
  std::chrono::milliseconds cap{2'000};
};

// The wait before retry number `retry` (0 for the first): uniform in
// [0, min(cap, base * 2^retry)].
std::chrono::milliseconds BackoffDelay(unsigned retry, std::mt19937_64& random,
                                       const BackoffPolicy& policy = {});

}  // namespace gpufs::remote
