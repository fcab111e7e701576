#include "source/remote/transfer/deadline.h"

#include <algorithm>
#include <limits>

namespace gpufs::remote {

std::chrono::milliseconds TotalDeadline(const TransferDeadlines& deadlines, uint64_t bytes) {
  // A rate of 0 would mean no deadline at all; the options refuse it, and here it is 1.
  const uint64_t rate = std::max<uint64_t>(deadlines.floor_rate, 1);
  // Milliseconds for `bytes`, rounded up, without overflowing for any size.
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max() / 4;
  const uint64_t whole_seconds = bytes / rate;
  const uint64_t rest_ms = ((bytes % rate) * 1000 + rate - 1) / rate;
  const uint64_t size_ms =
      whole_seconds >= kMax / 1000 ? kMax : std::min(kMax, whole_seconds * 1000 + rest_ms);
  const int64_t fixed = deadlines.connect.count() + deadlines.allowance.count();
  return std::chrono::milliseconds(fixed + static_cast<int64_t>(size_ms));
}

}  // namespace gpufs::remote
