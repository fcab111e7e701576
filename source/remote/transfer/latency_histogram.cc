#include "source/remote/transfer/latency_histogram.h"

#include <algorithm>
#include <cmath>

namespace gpufs::remote {

void LatencyHistogram::Record(std::chrono::nanoseconds latency) {
  const double us = std::max(1.0, std::chrono::duration<double, std::micro>(latency).count());
  const int bucket = std::clamp(static_cast<int>(std::log2(us) * kPerDoubling), 0, kBuckets - 1);
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
}

uint64_t LatencyHistogram::count() const {
  uint64_t total = 0;
  for (const auto& b : buckets_) total += b.load(std::memory_order_relaxed);
  return total;
}

double LatencyHistogram::PercentileMs(double fraction) const {
  std::array<uint64_t, kBuckets> counts;
  uint64_t total = 0;
  for (int b = 0; b < kBuckets; ++b)
    total += counts[b] = buckets_[b].load(std::memory_order_relaxed);
  if (total == 0) return 0;
  // The rank'th smallest value, counting from 1: the nearest-rank percentile.
  const auto rank = std::max<uint64_t>(
      1, static_cast<uint64_t>(std::ceil(std::clamp(fraction, 0.0, 1.0) * total)));
  uint64_t seen = 0;
  int bucket = 0;
  for (; bucket < kBuckets - 1; ++bucket) {
    seen += counts[bucket];
    if (seen >= rank) break;
  }
  const double middle_us = std::exp2((bucket + 0.5) / kPerDoubling);
  return middle_us / 1000.0;
}

}  // namespace gpufs::remote
