// An object store or HTTP server holding a dataset, as gpufs reads it: ranged GETs, HEADs
// and (S3 only) listings, many in flight at once over reused connections, each checked,
// retried and counted here so that every caller gets the same guarantees.
//
// - A few threads (transfer_threads) each run a libcurl multi handle with a share of the
//   connections; requests from any thread are queued to the least busy one and their
//   callbacks run on it (callbacks must be quick, must not block, and may run on any of
//   them at once).
// - Every object is named relative to the store's root (a bucket and key prefix, or a base
//   URL), and every message names it in full (s3://bucket/key or the URL).
// - A GET may carry what the mount saw of the object (size, ETag): the request is sent
//   with If-Match, and the response's ETag and Content-Range total are compared, so a
//   changed object fails with EIO naming it, never with other bytes.
// - Retries with exponential backoff and full jitter on broken or refused connections,
//   timeouts, 5xx, 429 and S3's SlowDown, until the request's deadline (retry_budget);
//   then ETIMEDOUT (a reader sees EIO) with the last reason, the attempts and the time.
//   4xx answers are not retried: they carry the store's own message.
// - Secrets are never logged, never put in a message, a URL or argv.
// - With peers (StoreConfig::peers), a GET that carries the digests of the object's
//   members and covers whole members is cut at block boundaries and each block asks its
//   peers in rendezvous order, then the store. A peer gets the store's URL path, Host and
//   signature, with the range left unsigned and no If-Match (a caching proxy rewrites
//   both); its answer is checked against the expected ETag like the store's. A peer that
//   fails is skipped for the next; an answer about the object itself (a 4xx, another
//   ETag) sends the block to the store. Once every block is in, every member is checked
//   against its SHA-256 (a peer writes its own headers: only the digests prove its
//   bytes): a member that does not match is counted (peer_mismatches) and read from the
//   store, and each peer whose part of it differed is logged by name and skipped like a
//   failed one. A GET without digests (an index, a listing, a tar's headers) goes to the
//   store alone.
// - Every attempt has a deadline (deadline.h): a server that trickles fails the attempt as
//   one that stalls does, so a read ends within the retry budget plus one deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "source/member_digests.h"
#include "source/remote/address/store_config.h"
#include "source/remote/transfer/deadline.h"

namespace gpufs::remote {

class StoreLoops;  // store_loops.h

struct GetRequest {
  std::string name;  // relative to the root
  uint64_t offset = 0;
  size_t length = 0;                   // bytes wanted; the object must hold all of them
  char* buffer = nullptr;              // `length` bytes, untouched after `done` runs
  std::optional<ObjectInfo> expected;  // what the mount saw: checked on the response
  // The digests of the object's members, it being their blob `blob`: only then may peers
  // serve the read, and each block they send is checked against them. Null: the store
  // alone serves it.
  std::shared_ptr<const MemberDigests> digests = nullptr;
  uint32_t blob = 0;
  // One attempt at the store, no retries and no peers: a read asked again right after it
  // gave up at the retry deadline (remote_source.h) learns at once whether the store is
  // back.
  bool one_attempt = false;
  // A reader waits on it: sent ahead of the queued requests, on a connection of its own if
  // every one is busy (transfer_loop.h).
  bool urgent = false;
};

// Counters of requests, kept by the store; Stats() reports them.
class ObjectStore {
 public:
  explicit ObjectStore(StoreConfig config);
  ~ObjectStore();  // fails what is still queued (ECANCELED), then stops the threads
  ObjectStore(const ObjectStore&) = delete;
  ObjectStore& operator=(const ObjectStore&) = delete;

  // A ranged GET of exactly `length` bytes. `done` runs once, on a store's thread, with
  // `length` or the error. Thread-safe.
  void Get(GetRequest request, std::function<void(Result<size_t>)> done);
  // A whole (small) object, refused when larger than `max_bytes`. Blocks; thread-safe.
  Result<std::string> GetWhole(const std::string& name, size_t max_bytes);
  // The size and ETag of an object, `done` on a store's thread. Thread-safe.
  void Head(const std::string& name, std::function<void(Result<ObjectInfo>)> done);
  Result<ObjectInfo> HeadSync(const std::string& name);
  // The size and ETag from a ranged GET of its first byte: a GET-presigned URL refuses a
  // HEAD, and a server that ignores Range is refused here (EOPNOTSUPP), not on every read.
  // Blocks; thread-safe.
  Result<ObjectInfo> ProbeSync(const std::string& name);
  // S3 only: every object whose name starts with `prefix` (relative to the root), all pages.
  // Blocks; thread-safe.
  Result<std::vector<ObjectInfo>> List(const std::string& prefix);

  // s3://bucket/root+name, or the URL as requested (a query shown as "?…"): how messages
  // name an object.
  std::string Describe(const std::string& name) const;
  const StoreConfig& config() const { return config_; }
  // s3: the region requests are signed for, the configured one until the store named
  // another (region.h). Thread-safe.
  std::string Region() const;

  // {"kind": "s3"|"http", "requests", "retries", "errors", "bytes", "in_flight",
  //  "latency_ms_p50", "latency_ms_p99", "tls_verify", "region" (s3), "transfer_threads"
  //  (requests answered by each thread)}: counts since start;
  //  latency of answered requests. Signed stores add "credentials" (CredentialProvider::Stats).
  nlohmann::json Stats() const;

 private:
  struct Block;
  void GetDirect(const Block& block);
  void GetFromPeer(std::shared_ptr<const Block> block, size_t rank, bool failed_before);
  struct PeerRead;
  void GetThroughPeers(GetRequest request, const std::string& object,
                       std::function<void(Result<size_t>)> finish);
  // Once every block of `read` is in: done when every member matches its digest, else
  // those that do not are read from the store.
  void CheckPeerRead(std::shared_ptr<PeerRead> read);
  Result<size_t> TakeStoreBytes(const PeerRead& read, const MemberDigests::Mismatch& member,
                                const char* store_bytes);
  StoreConfig config_;
  std::unique_ptr<StoreLoops> impl_;
};

}  // namespace gpufs::remote
