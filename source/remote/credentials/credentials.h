// Credentials that change under a mount: a CredentialSource fetches them (environment,
// STS, a program, a container or instance endpoint, the AWS files), and a
// CredentialProvider keeps the current ones and refreshes them on its own thread.
//
// Every attempt of the store signs with Current(): a snapshot that stays valid for as long
// as the attempt holds it, so a refresh never changes keys under a request. Refresh is
// before expiry (RefreshDue: 5 min before, or halfway through a short lifetime, as the AWS
// SDKs do), when the source says it changed (a rewritten ~/.aws/credentials), and at once
// when the store refuses the keys (IsCredentialRefusal); a failed refresh keeps the old
// keys until they expire and is tried again with backoff. Static keys from the environment
// are never refreshed.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "source/blob_source.h"
#include "source/remote/address/exchange.h"
#include "source/remote/address/store_config.h"

namespace gpufs::remote {

using WallClock = std::chrono::system_clock;

// Keys and, for temporary ones, when they expire.
struct CredentialSet {
  Credentials keys;
  std::optional<WallClock::time_point> expires;
};

// Where keys come from. Fetch blocks (a file, a program, an HTTP call); it runs on the
// provider's thread only, one call at a time.
class CredentialSource {
 public:
  virtual ~CredentialSource() = default;
  virtual Result<CredentialSet> Fetch() = 0;
  // For the log and the stats, never a secret: "web identity (role ARN) via STS URL".
  virtual std::string Describe() const = 0;
  // False for keys that never change (the environment's).
  virtual bool Refreshable() const { return true; }
  // True when what Fetch read changed since (a file's inode, size or mtime).
  virtual bool Changed() { return false; }
};

// When keys obtained at `obtained` and expiring at `expires` are refreshed: 5 min before
// expiry, or halfway through a lifetime shorter than 10 min; a minute on for keys that came
// expired. Pure, for tests.
WallClock::time_point RefreshDue(WallClock::time_point obtained, WallClock::time_point expires);
// The wait after `failures` failed refreshes in a row: 1 s doubling to 60 s, never past
// halfway to `expires` when that is sooner (but at least 1 s).
std::chrono::milliseconds RefreshBackoff(unsigned failures, WallClock::time_point now,
                                         std::optional<WallClock::time_point> expires);
// True for a 403 whose S3 error code says the keys themselves are refused (expired,
// unknown, revoked, suspended): new keys may get another answer. With `temporary_keys`
// (a session token), AccessDenied too: radosgw answers expired STS keys so.
bool IsCredentialRefusal(const Reply& reply, bool temporary_keys);

class CredentialProvider {
 public:
  // Fetches once (failing as the source says) and, for a refreshable source, starts the
  // refresher thread.
  static Result<std::shared_ptr<CredentialProvider>> Start(
      std::unique_ptr<CredentialSource> source);
  // Fixed keys (tests, callers that have them): never refreshed.
  static std::shared_ptr<CredentialProvider> Fixed(Credentials keys);
  ~CredentialProvider();  // stops and joins the refresher
  // A process that forks (gpufsd detaching) stops the refresher first, since threads do
  // not survive a fork, and starts it again in the child. Not thread-safe: call while no
  // store uses the provider.
  void StopRefresher();
  void StartRefresher();
  CredentialProvider(const CredentialProvider&) = delete;
  CredentialProvider& operator=(const CredentialProvider&) = delete;

  // The keys to sign with now. Thread-safe, cheap (a lock and a shared_ptr copy).
  std::shared_ptr<const Credentials> Current() const;
  // Asks the refresher for new keys now; returns at once. Thread-safe.
  void RequestRefresh();
  // Refresh attempts finished so far: a caller that asked waits for this to grow.
  uint64_t Attempts() const { return attempts_.load(std::memory_order_acquire); }
  bool Refreshable() const { return refreshable_; }
  std::string Describe() const { return description_; }
  // The log line's tail: " expire 2026-11-24T12:00:00Z", or "" for keys that do not.
  std::string ExpiryText() const;
  // source_stat's kCredentialSource, kCredentialExpiresIn (null: never), kCredentialRefreshes
  // and kCredentialRefreshFailures.
  nlohmann::json Stats() const;

 private:
  CredentialProvider(std::unique_ptr<CredentialSource> source, std::string description);
  void Run();
  void Install(CredentialSet set);

  std::unique_ptr<CredentialSource> source_;  // null for fixed keys; used on thread_ only
  const std::string description_;
  bool refreshable_ = false;
  std::atomic<uint64_t> attempts_{0};
  source_stat::CredentialCounters counters_;  // refreshes that got keys, and that failed

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::shared_ptr<const Credentials> current_;                // guarded by mu_
  std::optional<WallClock::time_point> expires_;              // guarded by mu_
  WallClock::time_point due_ = WallClock::time_point::max();  // guarded by mu_
  bool requested_ = false;                                    // guarded by mu_
  bool stopping_ = false;                                     // guarded by mu_
  std::thread thread_;                                        // last
};

// "2026-11-24T12:00:00Z" (fractions and +00:00 accepted), as STS and IMDS write times.
Result<WallClock::time_point> ParseIsoTime(std::string_view text);
std::string FormatIsoTime(WallClock::time_point when);

}  // namespace gpufs::remote
