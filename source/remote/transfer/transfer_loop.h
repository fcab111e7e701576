// One of the store's transfer threads: a libcurl multi handle running the Exchanges given to
// it, at most `connections` on the wire at once over reused connections, the rest queued in
// order; urgent exchanges (a reader waits on them) go first, and up to `connections` more of
// them may be on the wire when all are busy. A store runs several loops (object_store.cc),
// each with its share of the connections, so that copying bodies into the cache is not
// capped by one core; an exchange and all its attempts stay on the loop it was submitted to.
//
// Each attempt runs under the deadlines of deadline.h. An attempt that fails in a way worth
// repeating (a refused, reset or stalled connection, a deadline passed, a 5xx, 429 or SlowDown
// answer) is tried again after an exponential backoff with full jitter (backoff.h) until the
// request's deadline, the retry budget; then the exchange fails with ETIMEDOUT (EIO when an
// exchange's own count of attempts ran out first) and the last reason. Any
// other answer, 4xx included, goes back as a Reply for the caller to judge (responses.h). The loop
// never reads a body it was not asked for: a sink that is full, or a 200 where only a 206 may go,
// stops the transfer there.
#pragma once

#include <curl/curl.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <variant>
#include <vector>

#include "source/remote/address/exchange.h"
#include "source/remote/address/region.h"
#include "source/remote/address/store_config.h"
#include "source/remote/credentials/credentials.h"
#include "source/remote/transfer/backoff.h"
#include "source/remote/transfer/deadline.h"
#include "source/remote/transfer/retry_notice.h"
#include "source/remote/transfer/store_stats.h"

namespace gpufs::remote {

struct Transfer;  // transfer.h

struct LoopConfig {
  unsigned connections = 16;
  unsigned max_attempts = 0;  // 0: as many as the retry budget allows
  std::chrono::milliseconds retry_budget{20'000};
  TransferDeadlines deadlines;
  bool verify_tls = true;
  // SigV4 for S3 in `region` with the provider's keys of the moment; null: unsigned.
  std::shared_ptr<CredentialProvider> signing;
  std::string region;
  std::string ca_bundle;  // empty: curl's default CAs
  std::string endpoint;   // the store's, which region learning may move (region.h)
  bool s3 = false;        // an S3 store, whose wrong-region answers move its requests (region.h)
  BackoffPolicy backoff;
  // Unsigned requests to the store follow redirects; see ApplyHttpAccess.
  bool follow_redirects = false;
  std::optional<BasicAuth> basic_auth;
  std::string netrc_file;
};

LoopConfig LoopConfigFor(const StoreConfig& config);

class TransferLoop {
 public:
  // `counters` and `region` must outlive the loop; both may be shared by the store's loops:
  // requests, retries, bytes and latency are kept in the counters, and a region learned on
  // one loop signs the requests of every other.
  TransferLoop(LoopConfig config, StoreCounters& counters, BucketRegion& region);
  // Stop(), then frees the loop.
  ~TransferLoop();
  TransferLoop(const TransferLoop&) = delete;
  TransferLoop& operator=(const TransferLoop&) = delete;

  // Fails what is queued, waiting for a retry or on the wire with ECANCELED (on the loop's
  // thread), then joins it; from then on Submit and Post answer on the caller's thread.
  // Idempotent; not from the loop's own thread. A store stops all its loops before it frees
  // any, since a callback on one loop may submit to another.
  void Stop();

  // Queues `exchange`; its `done` runs once on the loop's thread (on the caller's, with
  // ECANCELED, once the loop stops). Thread-safe.
  void Submit(Exchange exchange);
  // Runs `task` on the loop's thread, in order with submissions (on the caller's once the
  // loop stops). Thread-safe.
  void Post(std::function<void()> task);
  // True on the loop's own thread, where nothing may wait for the loop.
  bool OnLoopThread() const { return std::this_thread::get_id() == thread_id_; }
  // Exchanges submitted and not yet answered: how busy the loop is. Thread-safe.
  size_t Pending() const { return pending_.load(std::memory_order_relaxed); }
  // Exchanges this loop has answered since it started. Thread-safe.
  uint64_t Answered() const { return answered_.load(std::memory_order_relaxed); }

 private:
  using Clock = std::chrono::steady_clock;
  using Incoming = std::variant<Exchange, std::function<void()>>;

  void Run();
  void TakeIncoming(std::deque<Incoming>& incoming);
  bool MayStart(const Transfer& transfer) const;
  void StartReady();
  void Start(std::unique_ptr<Transfer> transfer);
  void Reap();
  void Finish(std::unique_ptr<Transfer> transfer, CURLcode result);
  bool MovedToRegion(Transfer& transfer);
  void RetryOrFail(std::unique_ptr<Transfer> transfer, const std::string& reason);
  void SignAttempt(CURL* easy, Transfer& transfer);
  bool AwaitNewKeys(std::unique_ptr<Transfer>& transfer);
  void ResumeAwaitingKeys();
  void Deliver(std::unique_ptr<Transfer> transfer, Result<Reply> outcome);
  int PollTimeoutMs() const;
  void CancelAll();

  const LoopConfig config_;
  StoreCounters& counters_;
  BucketRegion& region_;
  CURLM* multi_ = nullptr;
  std::mt19937_64 random_{std::random_device{}()};
  std::atomic<size_t> pending_{0};
  std::atomic<uint64_t> answered_{0};

  // The loop thread's own state.
  std::deque<std::unique_ptr<Transfer>> ready_;  // to start when a connection is free
  std::multimap<Clock::time_point, std::unique_ptr<Transfer>> retries_;  // by when due
  std::map<CURL*, std::unique_ptr<Transfer>> active_;                    // on the wire
  std::vector<CURL*> idle_handles_;                                      // easy handles to reuse
  std::vector<std::unique_ptr<Transfer>> awaiting_keys_;  // refused keys: wait for new ones
  RetryNotice retry_notice_;

  std::mutex mu_;
  std::deque<Incoming> incoming_;  // guarded by mu_
  bool stopping_ = false;          // guarded by mu_
  std::thread thread_;             // last: starts once everything above exists
  std::thread::id thread_id_;      // thread_'s, kept once it is joined
};

}  // namespace gpufs::remote
