#include "source/remote/credentials/credentials.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <ctime>

#include <spdlog/spdlog.h>

#include "source/blob_source.h"
#include "source/remote/address/s3_xml.h"

namespace gpufs::remote {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

// Files that Changed() watches are looked at this often.
constexpr milliseconds kChangePoll{1000};
// A store's refusal asks for new keys at most this often: a bucket that denies the keys
// for good must not turn every read into a call to STS.
constexpr milliseconds kMinAskedInterval{5000};

}  // namespace

WallClock::time_point RefreshDue(WallClock::time_point obtained, WallClock::time_point expires) {
  const auto lifetime = expires - obtained;
  // Keys that came already expired may still work (a clock off by minutes); asking again
  // at once would only hammer the source, and the store's refusal renews them anyway.
  if (lifetime <= seconds(0)) return obtained + minutes(1);
  if (lifetime < minutes(10)) return obtained + lifetime / 2;
  return expires - minutes(5);
}

milliseconds RefreshBackoff(unsigned failures, WallClock::time_point now,
                            std::optional<WallClock::time_point> expires) {
  milliseconds wait{1000 << std::min(failures > 0 ? failures - 1 : 0u, 6u)};
  wait = std::min(wait, milliseconds(60'000));
  if (expires && *expires > now) {
    wait = std::min(wait, std::chrono::duration_cast<milliseconds>(*expires - now) / 2);
  }
  return std::max(wait, milliseconds(1000));
}

bool IsCredentialRefusal(const Reply& reply, bool temporary_keys) {
  if (reply.status != 403) return false;
  const std::optional<S3Error> error = ParseS3Error(reply.text);
  if (!error) return false;
  // radosgw answers expired STS keys with a plain AccessDenied.
  if (temporary_keys && error->code == "AccessDenied") return true;
  // radosgw answers a suspended user's keys with UserSuspended; AWS an expired session's
  // with ExpiredToken, deleted keys with InvalidAccessKeyId, a revoked token InvalidToken.
  static constexpr std::array<std::string_view, 6> kCodes = {
      "ExpiredToken",         "InvalidAccessKeyId", "InvalidToken",
      "TokenRefreshRequired", "UserSuspended",      "SignatureDoesNotMatch"};
  return std::find(kCodes.begin(), kCodes.end(), error->code) != kCodes.end();
}

Result<WallClock::time_point> ParseIsoTime(std::string_view text) {
  std::tm tm{};
  char rest[32] = {};
  const std::string s(text.substr(0, 64));
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%31s", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, rest) < 6) {
    return Fail(EINVAL, "'{}' is not a time like 2026-11-24T12:00:00Z", s);
  }
  std::string_view zone = rest;
  if (!zone.empty() && zone[0] == '.') {
    zone.remove_prefix(std::min(zone.size(), zone.find_first_not_of("0123456789", 1)));
  }
  if (zone != "Z" && zone != "+00:00" && zone != "") {
    return Fail(EINVAL, "'{}' is not a UTC time (Z or +00:00)", s);
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const time_t t = timegm(&tm);
  if (t == -1) return Fail(EINVAL, "'{}' is not a time", s);
  return WallClock::from_time_t(t);
}

std::string FormatIsoTime(WallClock::time_point when) {
  const time_t t = WallClock::to_time_t(when);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

CredentialProvider::CredentialProvider(std::unique_ptr<CredentialSource> source,
                                       std::string description)
    : source_(std::move(source)), description_(std::move(description)) {}

Result<std::shared_ptr<CredentialProvider>> CredentialProvider::Start(
    std::unique_ptr<CredentialSource> source) {
  Result<CredentialSet> first = source->Fetch();
  if (!first.ok()) return first.error();
  std::string description = source->Describe();
  const bool refreshable = source->Refreshable();
  std::shared_ptr<CredentialProvider> provider(
      new CredentialProvider(std::move(source), std::move(description)));
  provider->Install(std::move(*first));
  provider->refreshable_ = refreshable;
  provider->StartRefresher();
  return provider;
}

std::shared_ptr<CredentialProvider> CredentialProvider::Fixed(Credentials keys) {
  std::shared_ptr<CredentialProvider> provider(new CredentialProvider(nullptr, "fixed keys"));
  provider->Install(CredentialSet{std::move(keys), std::nullopt});
  return provider;
}

CredentialProvider::~CredentialProvider() { StopRefresher(); }

void CredentialProvider::StopRefresher() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  std::lock_guard lock(mu_);
  stopping_ = false;
}

void CredentialProvider::StartRefresher() {
  if (refreshable_ && !thread_.joinable()) thread_ = std::thread([this] { Run(); });
}

std::shared_ptr<const Credentials> CredentialProvider::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

void CredentialProvider::RequestRefresh() {
  if (!refreshable_) {
    attempts_.fetch_add(1, std::memory_order_release);  // nothing to refresh: done at once
    return;
  }
  {
    std::lock_guard lock(mu_);
    requested_ = true;
  }
  wake_.notify_all();
}

std::string CredentialProvider::ExpiryText() const {
  std::lock_guard lock(mu_);
  return expires_ ? ", expire " + FormatIsoTime(*expires_) : "";
}

nlohmann::json CredentialProvider::Stats() const {
  nlohmann::json stats;
  stats[source_stat::kCredentialSource] = description_;
  std::optional<WallClock::time_point> expires;
  {
    std::lock_guard lock(mu_);
    expires = expires_;
  }
  stats[source_stat::kCredentialExpiresIn] =
      expires
          ? nlohmann::json(std::chrono::duration_cast<seconds>(*expires - WallClock::now()).count())
          : nlohmann::json();
  PutCounts(stats, source_stat::kCredentialCounterFigures, counters_);
  return stats;
}

void CredentialProvider::Install(CredentialSet set) {
  const auto now = WallClock::now();
  std::lock_guard lock(mu_);
  current_ = std::make_shared<const Credentials>(std::move(set.keys));
  expires_ = set.expires;
  due_ = expires_ ? RefreshDue(now, *expires_) : WallClock::time_point::max();
}

// The refresher: wakes when keys are due, when asked, and every kChangePoll to ask the
// source whether what it read changed.
void CredentialProvider::Run() {
  unsigned failures = 0;
  auto last_asked = std::chrono::steady_clock::time_point::min();
  std::unique_lock lock(mu_);
  while (!stopping_) {
    const auto until = std::min(due_, WallClock::now() + kChangePoll);
    wake_.wait_until(lock, until, [this] { return stopping_ || requested_; });
    if (stopping_) break;
    const bool asked = std::exchange(requested_, false);
    const bool due = WallClock::now() >= due_;
    lock.unlock();
    const bool changed = !due && source_->Changed();
    const auto now = std::chrono::steady_clock::now();
    const bool too_soon = last_asked != std::chrono::steady_clock::time_point::min() &&
                          now - last_asked < kMinAskedInterval;
    if (asked && !too_soon) last_asked = now;
    if (due || changed || (asked && !too_soon)) {
      Result<CredentialSet> fresh = source_->Fetch();
      if (fresh.ok()) {
        failures = 0;
        Install(std::move(*fresh));
        counters_.refreshes.fetch_add(1, std::memory_order_relaxed);
        spdlog::info("credentials: refreshed from {}{}", description_, ExpiryText());
      } else {
        counters_.refresh_failures.fetch_add(1, std::memory_order_relaxed);
        const auto now = WallClock::now();
        std::optional<WallClock::time_point> expires;
        {
          std::lock_guard guard(mu_);
          expires = expires_;
          due_ = now + RefreshBackoff(++failures, now, expires_);
        }
        spdlog::warn("credentials: {} (keeping the current keys{})", fresh.error().message,
                     expires ? " until " + FormatIsoTime(*expires) : "");
      }
    }
    if (asked || due || changed) attempts_.fetch_add(1, std::memory_order_release);
    lock.lock();
  }
}

}  // namespace gpufs::remote
