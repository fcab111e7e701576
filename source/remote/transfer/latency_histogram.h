// Latency percentiles without locks or allocation: a fixed log-scale histogram of atomic
// buckets, four per doubling from 1 µs to about 4.5 minutes, so a percentile is known to
// within ~9% and recording is one relaxed increment on the thread that measured it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace gpufs::remote {

class LatencyHistogram {
 public:
  // Thread-safe, lock-free. Values outside the range land in the first or last bucket.
  void Record(std::chrono::nanoseconds latency);
  // The `fraction` (0..1) percentile in milliseconds, as the middle of its bucket; 0 when
  // nothing was recorded. Thread-safe; concurrent records may or may not be counted.
  double PercentileMs(double fraction) const;
  uint64_t count() const;

 private:
  static constexpr int kPerDoubling = 4;
  static constexpr int kBuckets = 28 * kPerDoubling;  // 2^28 µs: 268 s
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
};

}  // namespace gpufs::remote
