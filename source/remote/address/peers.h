// The caching proxies of a training job's nodes (--peers), and which of them a block of a
// blob goes to.
//
// - Rendezvous hashing: a block's peers are ranked by a hash of (peer, block key), the
//   highest first. Every node ranks alike without talking to the others, and a change of
//   the list moves only the blocks whose first peer came or went.
// - The routing unit is an aligned block of a blob, the size of the proxies' slices: a
//   group read and a single file's read of the same bytes meet in the same proxy, and a
//   slice never leaves the store for two proxies.
// - A peer that fails (refused, cut, timed out, 5xx) is skipped for `retry_after`; the next
//   request after that tries it once more, and it is back as soon as it answers.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "source/figure.h"

namespace gpufs::remote {

// The keys of each peer's stats (under source_stat::kPeers), and what /metrics exports of
// them (whether it is up, then its counters), one series per peer labelled by its URL.
namespace peer_stat {
inline constexpr const char* kUrl = "url";
inline constexpr const char* kUp = "up";  // false while it is skipped
inline constexpr const char* kRequests = "requests";
inline constexpr const char* kBytes = "bytes";
inline constexpr const char* kFailures = "failures";
// A peer's counts, each under the key of its row below.
struct Counters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> failures{0};
};
inline constexpr Figure kUpFigure = {kUp, "peer_up", kGauge,
                                     "Whether the peer cache is asked (1) or skipped (0)."};
inline constexpr CounterFigure<Counters> kCounterFigures[] = {
    {{kRequests, "peer_requests_total", kCounter, "Requests sent to the peer cache."},
     &CountOf<&Counters::requests>},
    {{kBytes, "peer_bytes_total", kCounter, "Bytes received from the peer cache."},
     &CountOf<&Counters::bytes>},
    {{kFailures, "peer_failures_total", kCounter, "Requests the peer cache failed."},
     &CountOf<&Counters::failures>}};
}  // namespace peer_stat

struct PeerConfig {
  std::vector<std::string> urls;  // "http://host:port", as ParsePeerList checks them
  uint64_t block = 4 << 20;       // the routing unit, equal to the proxies' slice size
  std::chrono::milliseconds retry_after{5'000};
  // The job's secret, which the peers' nginx asks of every request (403 without it);
  // empty: none is sent. Never logged, and in no stat, xattr or message.
  std::string secret{};
};

// The cookie that carries the secret to a peer. A cookie, not a header of its own: curl
// signs every header it is given with SigV4, and the peer, which strips the secret before
// it forwards a request to the store, would then break the signature. The peer's config
// (deploy/nginx/gpufs-peer.conf) reads it as $cookie_gpufs_peer_secret.
inline constexpr const char* kPeerSecretCookie = "gpufs_peer_secret";

// The secret in a file: one word of 16 to 512 of [A-Za-z0-9._~-] (e.g. `openssl rand -hex
// 32`), a final newline allowed. The file must be a regular file that no other user may
// read or write (mode 0600 or 0400). Messages name the file, never its content.
Result<std::string> ReadPeerSecret(const std::filesystem::path& path);

// "URL,URL,..." (blanks around commas allowed) as peer URLs: http:// or https://, a host,
// an optional port, no path beyond "/", no user, query or fragment; no URL twice.
Result<std::vector<std::string>> ParsePeerList(std::string_view list);
// A file of peer URLs, one per line; blank lines and '#' comments are skipped.
Result<std::vector<std::string>> ReadPeerFile(const std::filesystem::path& path);

// Thread-safe.
class PeerSet {
 public:
  using Clock = std::chrono::steady_clock;

  explicit PeerSet(PeerConfig config);
  ~PeerSet();

  size_t size() const { return config_.urls.size(); }
  const std::string& url(size_t peer) const { return config_.urls[peer]; }
  uint64_t block() const { return config_.block; }
  const std::string& secret() const { return config_.secret; }

  // Every peer, the first choice for `key` first.
  std::vector<uint32_t> Order(std::string_view key) const;
  // Whether `peer` may be asked now: it is up, or it has been down for `retry_after`
  // (then this call lets one request try it, and the others wait for that one's outcome).
  bool MayAsk(uint32_t peer, Clock::time_point now);
  // The outcome of a request to `peer`: an answer (`bytes` of body), or a failure of the
  // peer itself. State changes are logged, once each.
  void Answered(uint32_t peer, uint64_t bytes);
  void Failed(uint32_t peer, const std::string& reason, Clock::time_point now);

  // [{"url", "up", "requests", "bytes", "failures"}], in the order of the list.
  nlohmann::json Stats() const;

 private:
  struct Peer;
  const PeerConfig config_;
  const std::vector<uint64_t> seeds_;  // a hash of each URL, mixed into its scores
  std::unique_ptr<Peer[]> peers_;
};

}  // namespace gpufs::remote
