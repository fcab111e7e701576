// The counters an object store keeps. Their names are source_stat's (source/blob_source.h),
// shared with every other blob source, gpufs-stat and the metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "source/remote/transfer/latency_histogram.h"

namespace gpufs::remote {

// Updated by the store's transfer threads (and by whoever finishes a request), read by Stats() on
// any thread: relaxed atomics, each counter on its own.
struct StoreCounters {
  std::atomic<uint64_t> requests{0};  // attempts sent, retries included
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> errors{0};  // requests that failed for good
  std::atomic<uint64_t> bytes{0};   // body bytes received into callers' buffers
  // The same through peer caches (--peers): requests and bytes there, and reads the store
  // served after every peer failed. Failures are the peers' own (PeerSet).
  std::atomic<uint64_t> peer_requests{0};
  std::atomic<uint64_t> peer_bytes{0};
  std::atomic<uint64_t> peer_fallbacks{0};
  std::atomic<uint64_t> peer_mismatches{0};  // blocks whose bytes did not match the digests
  std::atomic<int64_t> in_flight{0};         // requests queued or on the wire
  LatencyHistogram latency;                  // of attempts that got an HTTP answer
};

// The counters under source_stat's keys, with `kind` ("s3" or "http").
nlohmann::json StatsJson(std::string_view kind, const StoreCounters& counters);

}  // namespace gpufs::remote
