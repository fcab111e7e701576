// The blob source: the one seam every byte of a blob comes through. The group cache's
// loads, member reads, the no-cache mode, --verify and the GPU client library all read
// through it, so a new place to keep blobs (local files, an object store, an HTTP server,
// the unit tests' fake) is taught once, and its checks, retries and counters cover every
// path.
//
// Reads are asynchronous: Submit queues them and each one's `done` runs exactly once, on a
// source thread, with the byte count or an error whose message names the blob. A read may
// come back short only where the blob ends. Sources are thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "dataset/format/native_index.h"
#include "source/device_shape.h"
#include "source/figure.h"

namespace gpufs {

// The keys of every source's Stats(), spelled here once for the stats, gpufs-stat and the
// metrics.
namespace source_stat {
inline constexpr const char* kKind = "kind";
inline constexpr const char* kRequests = "requests";  // requests sent, retries included
inline constexpr const char* kRetries = "retries";
inline constexpr const char* kErrors = "errors";  // reads that failed in the end
inline constexpr const char* kBytes = "bytes";
inline constexpr const char* kInFlight = "in_flight";
inline constexpr const char* kLatencyP50 = "latency_ms_p50";
inline constexpr const char* kLatencyP99 = "latency_ms_p99";
// Object stores read through peer caches (--peers): requests and bytes served by peers,
// peer failures, reads the store served after the peers failed, blocks a peer sent whose
// bytes did not match the index's SHA-256 (read again elsewhere), and each peer's counts.
inline constexpr const char* kPeerRequests = "peer_requests";
inline constexpr const char* kPeerBytes = "peer_bytes";
inline constexpr const char* kPeerFailures = "peer_failures";
inline constexpr const char* kPeerFallbacks = "peer_fallbacks";
inline constexpr const char* kPeerMismatches = "peer_mismatches";
inline constexpr const char* kPeers = "peers";
// A signed store's credentials: an object of the four keys after it.
inline constexpr const char* kCredentials = "credentials";
inline constexpr const char* kCredentialSource = "source";
inline constexpr const char* kCredentialExpiresIn = "expires_in_s";  // null: never
inline constexpr const char* kCredentialRefreshes = "refreshes";
inline constexpr const char* kCredentialRefreshFailures = "refresh_failures";
// Object stores: the region requests are signed for (learned when the configured one was
// wrong), and false when --no-verify-tls turned certificate checks off.
inline constexpr const char* kRegion = "region";
inline constexpr const char* kTlsVerify = "tls_verify";
// Object stores: the requests each transfer thread has answered, one count per thread.
inline constexpr const char* kTransferThreads = "transfer_threads";
// Compressed archives (source/decode): groups decoded, their bytes, the archive's bytes
// read for them, groups that failed to decode, reads answered from a group decoded before,
// and the time the decoding threads spent.
inline constexpr const char* kDecodedGroups = "decoded_groups";
inline constexpr const char* kDecodedBytes = "decoded_bytes";
inline constexpr const char* kDecodeReadBytes = "decode_read_bytes";
inline constexpr const char* kDecodeErrors = "decode_errors";
inline constexpr const char* kDecodeReuses = "decode_reuses";
inline constexpr const char* kDecodeSeconds = "decode_seconds";

// A compressed archive's counts (DecodedSource), and a signed store's refreshes of its
// credentials, each under the key of its row below.
struct DecodeCounters {
  std::atomic<uint64_t> groups{0}, bytes{0}, read_bytes{0}, errors{0}, reuses{0};
};
struct CredentialCounters {
  std::atomic<uint64_t> refreshes{0}, refresh_failures{0};
};

// What /metrics exports of them: the source's own, a compressed archive's, then the
// credentials' (beside an info series that names where they come from); each peer's are
// peers.h's.
inline constexpr Figure kFigures[] = {
    {kRequests, "source_requests_total", kCounter,
     "Requests sent to the blob source, retries included."},
    {kRetries, "source_retries_total", kCounter, "Requests to the blob source that were retried."},
    {kErrors, "source_errors_total", kCounter, "Blob reads that failed in the end."},
    {kBytes, "source_bytes_total", kCounter, "Bytes read from the blob source."},
    {kInFlight, "source_in_flight", kGauge, "Blob source requests in flight."},
    {kLatencyP50, "source_latency_p50_ms", kGauge, "Median latency of answered source requests."},
    {kLatencyP99, "source_latency_p99_ms", kGauge,
     "99th percentile latency of answered source requests."},
    {kPeerFallbacks, "source_peer_fallbacks_total", kCounter,
     "Blocks read from the store after every peer cache failed them."},
    {kPeerMismatches, "source_peer_mismatches_total", kCounter,
     "Blocks a peer cache sent whose bytes did not match the index's SHA-256."}};
inline constexpr CounterFigure<DecodeCounters> kDecodeCounterFigures[] = {
    {{kDecodedGroups, "decoded_groups_total", kCounter, "Groups of a compressed archive decoded."},
     &CountOf<&DecodeCounters::groups>},
    {{kDecodedBytes, "decoded_bytes_total", kCounter, "Bytes of a compressed archive decoded."},
     &CountOf<&DecodeCounters::bytes>},
    {{kDecodeReadBytes, "decode_read_bytes_total", kCounter,
      "Bytes of a compressed archive read to decode its groups."},
     &CountOf<&DecodeCounters::read_bytes>},
    {{kDecodeErrors, "decode_errors_total", kCounter,
      "Groups of a compressed archive that could not be decoded."},
     &CountOf<&DecodeCounters::errors>},
    {{kDecodeReuses, "decode_reuses_total", kCounter,
      "Reads answered from a group decoded for an earlier read."},
     &CountOf<&DecodeCounters::reuses>}};
inline constexpr Figure kDecodeSecondsFigure = {
    kDecodeSeconds, "decode_seconds_total", kCounter,
    "Time the decoding threads spent on a compressed archive's groups."};
inline constexpr Figure kCredentialInfo = {kCredentialSource, "credentials_info", kGauge,
                                           "Where the store's credentials come from (1)."};
inline constexpr Figure kCredentialExpiresInFigure = {kCredentialExpiresIn,
                                                      "credentials_expires_in_s", kGauge,
                                                      "Seconds until the credentials expire."};
inline constexpr CounterFigure<CredentialCounters> kCredentialCounterFigures[] = {
    {{kCredentialRefreshes, "credentials_refreshes", kCounter,
      "Credential refreshes that got keys."},
     &CountOf<&CredentialCounters::refreshes>},
    {{kCredentialRefreshFailures, "credentials_refresh_failures", kCounter,
      "Credential refreshes that failed."},
     &CountOf<&CredentialCounters::refresh_failures>}};
}  // namespace source_stat

// What the bytes of a read are for, which decides what other copies of them to avoid.
enum class ReadKind {
  kGroup,   // a group for the pinned cache: bypass the kernel's page cache where possible
  kMember,  // bytes about to be served, which the kernel then caches as the served file
  kStage,   // bytes copied on to a GPU, of which no other copy stays on the host: the
            // kernel's page cache keeps them as it sees fit, for the next epoch
};

struct BlobRead {
  uint32_t blob = 0;
  uint64_t offset = 0;
  size_t length = 0;
  char* buffer = nullptr;  // `length` bytes; for kGroup aligned to Alignment()
  std::function<void(Result<size_t>)> done;
  // A reader waits on these bytes: the source sends the read ahead of those it has queued
  // (kMember reads always are).
  bool urgent = false;
};

class BlobSource {
 public:
  virtual ~BlobSource() = default;
  // "local", "s3" or "http": what the stats call it.
  virtual std::string_view kind() const = 0;
  virtual size_t blob_count() const = 0;
  // How messages and user.gpufs.blob name a blob: its path, or its URL.
  virtual std::string Describe(uint32_t blob) const = 0;
  // What the mount saw of `blob` (size, checksum, ...), or null when it was told nothing.
  virtual const BlobInfo* Expected(uint32_t blob) const = 0;
  // What changes when the blob's bytes do (its ETag, checksum, size or modification
  // time); the disk tier keys its copies by it. The default is what Expected() says;
  // empty when nothing is known, and then nothing of the blob is kept on disk.
  virtual std::string Identity(uint32_t blob) const;
  // Whether a read's latency says how many reads wait before it at the source, which the
  // group cache's adaptive window follows (group_loader.h); not so where reads wait on
  // decoding, whose cost depends on what was decoded before (source/decode).
  virtual bool LatencyTracksQueue() const { return true; }
  // Whether [offset, offset + length) of `blob` are the blob's own bytes at those offsets,
  // which a client may read from the blob itself (user.gpufs.blob, user.gpufs.offset);
  // not so for bytes decoded from a compressed archive (source/decode).
  virtual bool LiesAsStored(uint32_t, uint64_t, uint64_t) const { return true; }
  // What kGroup reads need of offsets, lengths and buffers (O_DIRECT wants 4096).
  virtual size_t Alignment() const { return 1; }
  // The largest single request worth making: a longer range goes as parts this large,
  // all in flight at once (0: as one request).
  virtual size_t PartSize() const { return 0; }
  // How many parts in flight keep the source busy: more only wait behind them, where a
  // part someone waits on could have gone first.
  virtual unsigned PartsInFlight() const { return 4; }
  // The smallest read worth making for a reader that waits: asking for less costs the
  // source as much (a device request; a store's round trip is most of a small GET's time).
  // A multiple of Alignment(); 0: PartSize().
  virtual size_t DemandSize() const { return 0; }

  // Queues `reads`; thread-safe.
  virtual void Submit(ReadKind kind, std::vector<BlobRead> reads) = 0;
  // One read, waited for. The default submits and waits; a source with a cheaper
  // synchronous path overrides it. Thread-safe.
  virtual Result<size_t> Read(ReadKind kind, uint32_t blob, uint64_t offset, size_t length,
                              char* buffer);

  // The kernel's page cache, where a local source reads through it (cache/miss_reads.h):
  // the shape of the device under it, or none where the source has no page cache worth
  // reading ahead into (a store; files in RAM already are one).
  virtual std::optional<DeviceShape> PageCacheShape() const { return std::nullopt; }
  // Starts reading [offset, offset + length) of `blob` into the page cache, the part
  // holding byte `first` before the rest, and returns without waiting; `landed` runs once
  // that part is there (or failed to come), `done` once the whole range is. False
  // (nothing started, neither runs) where there is none, or while as much as keeps the
  // device busy is on its way. Thread-safe.
  virtual bool Readahead(uint32_t blob, uint64_t offset, size_t length, uint64_t first,
                         std::function<void()> landed, std::function<void()> done);
  // Of bytes about to be served, what the page cache holds now, without waiting for the
  // device: every byte asked for, or EAGAIN (some are not there, or still on their way).
  // Thread-safe.
  virtual Result<size_t> ReadCached(uint32_t blob, uint64_t offset, size_t length, char* buffer);

  // Counters of the source (keys in source_stat), reported under "io" in user.gpufs.stats,
  // the control socket's stats and /metrics.
  virtual nlohmann::json Stats() const = 0;
};

// Reads [offset, offset + length) of `blob` into `buffer`, as parts of at most `part`
// bytes (0: the source's PartSize(), or one request) all in flight at once, and waits.
// Returns the bytes read before the first short part (the blob's end), or the first error.
Result<size_t> ReadRange(BlobSource& source, ReadKind kind, uint32_t blob, uint64_t offset,
                         size_t length, char* buffer, size_t part = 0);

// ReadRange that fails, naming `what`, unless every byte came.
Status ReadExactly(BlobSource& source, ReadKind kind, uint32_t blob, uint64_t offset, size_t length,
                   char* buffer, std::string_view what);

}  // namespace gpufs
