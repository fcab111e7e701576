// How long to wait before a retry, and whether there is time for one: exponential backoff
// with full jitter (a uniform draw below the exponential bound), so clients that failed
// together do not return together, within a deadline per request (--retry-seconds).
//
// The AWS SDKs' "standard" mode draws below min(1 s * 2^retry, 20 s) and stops after 3
// attempts. A training job wants the opposite trade: a read may wait out an outage of
// the whole deadline (20 s by default), and once the store is back it should notice within
// a few seconds, not sleep up to 20 s more. So the base is 100 ms and the cap 2 s: the
// first retries come quickly (a dropped connection), later ones about once a second on
// average, and over 20 attempts fit in the default 20 s deadline.
#pragma once

#include <chrono>
#include <optional>
#include <random>

namespace gpufs::remote {

struct BackoffPolicy {
  std::chrono::milliseconds base{100};
  std::chrono::milliseconds cap{2'000};
};

// The wait before retry number `retry` (0 for the first): uniform in
// [0, min(cap, base * 2^retry)].
std::chrono::milliseconds BackoffDelay(unsigned retry, std::mt19937_64& random,
                                       const BackoffPolicy& policy = {});

// The wait before retry number `retry` of a request that began `elapsed` ago and must end
// by `deadline` (both from its first attempt's start): the backoff, cut short so that the
// retry starts at the deadline at the latest; nullopt once the deadline has passed. The
// last attempt then runs under its own transfer deadline (deadline.h), so a request ends
// within `deadline` plus one attempt.
std::optional<std::chrono::milliseconds> RetryDelay(unsigned retry,
                                                    std::chrono::milliseconds elapsed,
                                                    std::chrono::milliseconds deadline,
                                                    std::mt19937_64& random,
                                                    const BackoffPolicy& policy = {});

}  // namespace gpufs::remote
