#include "source/remote/transfer/store_stats.h"

#include <algorithm>

#include "source/blob_source.h"

namespace gpufs::remote {

nlohmann::json StatsJson(std::string_view kind, const StoreCounters& counters) {
  using namespace source_stat;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  nlohmann::json j;
  j[kKind] = std::string(kind);
  j[kRequests] = counters.requests.load(kRelaxed);
  j[kRetries] = counters.retries.load(kRelaxed);
  j[kErrors] = counters.errors.load(kRelaxed);
  j[kBytes] = counters.bytes.load(kRelaxed);
  j[kPeerRequests] = counters.peer_requests.load(kRelaxed);
  j[kPeerBytes] = counters.peer_bytes.load(kRelaxed);
  j[kPeerFallbacks] = counters.peer_fallbacks.load(kRelaxed);
  j[kPeerMismatches] = counters.peer_mismatches.load(kRelaxed);
  j[kInFlight] = static_cast<uint64_t>(std::max<int64_t>(0, counters.in_flight.load(kRelaxed)));
  j[kLatencyP50] = counters.latency.PercentileMs(0.50);
  j[kLatencyP99] = counters.latency.PercentileMs(0.99);
  return j;
}

}  // namespace gpufs::remote
