// The transfer threads of an ObjectStore and what they share: a TransferLoop per thread
// with its share of the connections, the counters, the bucket's region, and, with peers,
// the peer set and the hash workers. ObjectStore (object_store.cc) decides what to ask;
// this is where it is sent.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "source/remote/address/peers.h"
#include "source/remote/address/region.h"
#include "source/remote/address/s3_xml.h"
#include "source/remote/address/store_config.h"
#include "source/remote/transfer/hash_workers.h"
#include "source/remote/transfer/responses.h"
#include "source/remote/transfer/store_stats.h"
#include "source/remote/transfer/transfer_loop.h"

namespace gpufs::remote {

// A listing page is a few hundred bytes per key; a page larger than this is not a listing.
inline constexpr size_t kMaxListPage = 64 << 20;

// Waits on another thread for a call that reports through a callback.
template <typename T, typename Start>
Result<T> Await(Start start) {
  std::promise<Result<T>> promise;
  std::future<Result<T>> future = promise.get_future();
  start([&promise](Result<T> result) { promise.set_value(std::move(result)); });
  return future.get();
}

class StoreLoops {
 public:
  explicit StoreLoops(const StoreConfig& config) : region(config.region, config.endpoint) {
    // Each loop has its share of the connections, and none goes without one.
    const unsigned threads =
        std::clamp(config.transfer_threads, 1u, std::max(1u, config.connections));
    LoopConfig loop_config = LoopConfigFor(config);
    const unsigned connections = loop_config.connections;
    for (unsigned i = 0; i < threads; ++i) {
      loop_config.connections = connections / threads + (i < connections % threads ? 1 : 0);
      loops.push_back(std::make_unique<TransferLoop>(loop_config, counters, region));
    }
    if (config.peers.urls.empty()) return;
    peers = std::make_unique<PeerSet>(config.peers);
    hashers = std::make_unique<HashWorkers>(HashWorkers::DefaultThreads());
  }
  // The hashers finish their jobs while the loops still take what they submit; a read that
  // completes while the loops stop is then hashed on a loop's thread. Every loop stops
  // before any is freed: a callback on one may submit to another, which then answers at once.
  ~StoreLoops() {
    if (hashers) hashers->Stop();
    for (auto& loop : loops) loop->Stop();
  }

  // The loop with the fewest exchanges pending, looking from the next one round: requests
  // spread over the threads, and a loop slowed by its transfers gets fewer.
  TransferLoop& Loop() {
    const size_t start = next_loop.fetch_add(1, std::memory_order_relaxed);
    TransferLoop* best = nullptr;
    for (size_t i = 0; i < loops.size(); ++i) {
      TransferLoop& loop = *loops[(start + i) % loops.size()];
      if (!best || loop.Pending() < best->Pending()) best = &loop;
    }
    return *best;
  }

  // Wraps `done` so that the request counts as in flight until it runs, and as an error
  // when it fails.
  template <typename T>
  std::function<void(Result<T>)> Track(std::function<void(Result<T>)> done) {
    counters.in_flight.fetch_add(1, std::memory_order_relaxed);
    return [this, done = std::move(done)](Result<T> result) {
      counters.in_flight.fetch_sub(1, std::memory_order_relaxed);
      if (!result.ok()) counters.errors.fetch_add(1, std::memory_order_relaxed);
      done(std::move(result));
    };
  }

  // One page of a listing, waited for.
  Result<ListPage> FetchPage(Exchange exchange) {
    return Await<ListPage>([&](std::function<void(Result<ListPage>)> done) {
      exchange.max_text = kMaxListPage;
      exchange.done = [object = exchange.object,
                       finish = Track(std::move(done))](Result<Reply> reply) {
        if (!reply.ok()) return finish(reply.error());
        if (reply->status != 200) return finish(StatusError(*reply, "list", object));
        Result<ListPage> parsed = ParseListObjectsV2(reply->text);
        if (!parsed.ok()) {
          return finish(Fail(EIO, "cannot list {}: {}", object, parsed.error().message));
        }
        finish(std::move(parsed));
      };
      Loop().Submit(std::move(exchange));
    });
  }

  // The error of a blocking call made from the loop's own thread, which would wait forever.
  std::optional<Error> RefuseOnLoopThread(std::string_view verb, const std::string& object) {
    const bool on_loop = std::any_of(loops.begin(), loops.end(),
                                     [](const auto& loop) { return loop->OnLoopThread(); });
    if (!on_loop) return std::nullopt;
    return Fail(EDEADLK, "cannot {} {}: a blocking call from a store callback", verb, object);
  }

  std::unique_ptr<PeerSet> peers;        // none without --peers
  std::unique_ptr<HashWorkers> hashers;  // with peers; outlives the loop
  std::atomic<uint64_t> peer_answers_logged{0};
  std::atomic<uint64_t> mismatches_logged{0};
  StoreCounters counters;  // before the loops, which use it until they stop
  BucketRegion region;     // shared by the loops: what one learns, all sign for
  std::atomic<size_t> next_loop{0};
  std::vector<std::unique_ptr<TransferLoop>> loops;
};

}  // namespace gpufs::remote
