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

#include "dataset/error.h"
#include "source/member_digests.h"
#include "source/remote/deadline.h"
#include "source/remote/peers.h"

namespace gpufs::remote {

enum class Scheme { kS3, kHttp };

struct Credentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty: none
};

class CredentialProvider;  // credentials.h

// HTTP basic credentials, sent to the source's own host only (never after a redirect to
// another host, never to a peer).
struct BasicAuth {
  std::string user;
  std::string password;
};

// The object an http(s) URL names, requested exactly as typed (http_url.h).
struct TypedObject {
  std::string name;    // %-decoded: the name as ObjectStore calls take it
  std::string target;  // the last path segment as typed, then "?query" when there is one
};

// Half the cores, from 2 to 8.
unsigned DefaultTransferThreads();

// Requests in flight to a store at most, unless --connections says otherwise.
inline constexpr unsigned kDefaultConnections = 32;

struct StoreConfig {
  Scheme scheme = Scheme::kHttp;
  // s3: the endpoint, e.g. "http://127.0.0.1:7480" or "https://s3.us-east-1.amazonaws.com";
  // http: the origin, e.g. "http://127.0.0.1:8080". No trailing slash.
  std::string endpoint;
  std::string bucket;  // s3 only
  // Key prefix (s3) or URL path (http) that object names are relative to: empty or ending
  // in '/', no leading '/' for s3, leading '/' for http.
  std::string root;
  std::string region = "us-east-1";
  bool path_style = true;  // s3: endpoint/bucket/key, else bucket.host/key
  // The keys of each attempt, refreshed as they expire; null: requests are not signed.
  std::shared_ptr<CredentialProvider> credentials;
  unsigned connections = kDefaultConnections;  // requests in flight at most
  // Threads that run the transfers, the connections split between them (at most one each):
  // copying bodies is the store's CPU work, more than one core's at tens of Gbit/s.
  unsigned transfer_threads = DefaultTransferThreads();
  unsigned max_attempts = 0;                       // per request; 0: until the deadline
  std::chrono::milliseconds retry_budget{20'000};  // the deadline, from the first attempt
  TransferDeadlines deadlines;                     // of each attempt, a peer's included
  bool verify_tls = true;                          // false only by --no-verify-tls
  unsigned list_page_size = 0;  // s3: keys per listing page; 0: the store's default (1000)
  // s3: the most one listing takes in before it fails. A dataset's folder holds thousands of
  // blobs; a store that keeps saying "truncated" (hostile, or a bucket's root of millions
  // of other objects) must not keep a mount listing while its memory grows.
  unsigned list_max_pages = 4096;
  size_t list_max_keys = size_t{1} << 20;
  // http only: credentials (a URL's user:password@), a checked .netrc curl may take them
  // from (empty: none), and the object the URL names, asked for as typed.
  std::optional<BasicAuth> basic_auth;
  std::string netrc_file;
  std::optional<TypedObject> typed_object;
  // Caching proxies that ranged GETs go through (no URLs: none); see peers.h. HEADs and
  // listings always go to the store.
  PeerConfig peers;
  // A PEM file of the CAs a server's certificate may come from (tls.h); empty: the system's.
  std::string ca_bundle;
  // s3: every request says "x-amz-request-payer: requester" (signed), as a requester-pays
  // bucket asks of anyone but its owner (--request-payer requester).
  bool request_payer = false;
};

// What the URL names and how to reach it, from the URL, the options and the conventions of
// the AWS tools (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE,
// AWS_SHARED_CREDENTIALS_FILE and ~/.aws/credentials, AWS_CONFIG_FILE and ~/.aws/config
// with region and endpoint_url, AWS_REGION, AWS_DEFAULT_REGION, AWS_ENDPOINT_URL).
struct LocationOptions {
  std::string endpoint;          // --endpoint; wins over the environment and profile
  bool no_sign_request = false;  // --no-sign-request: public buckets
  unsigned connections = kDefaultConnections;
  // False: only keys written in the environment or the AWS files; no program is run and no
  // server asked for keys (the fuzzer of the AWS files).
  bool active_credential_sources = true;
  std::string ca_bundle{};  // --ca-bundle; wins over the environment and profile (tls.h)
};

struct Location {
  StoreConfig config;  // root: the URL's folder
  std::string leaf;    // the URL's last segment when it names an object, else empty
  // For messages and user.gpufs.source: as given, without a password or a query's
  // signature (http_url.h).
  std::string url;
  // What the caller should tell the user before it goes on (a .netrc left unused, say).
  std::vector<std::string> warnings;
};

// `env` maps names to values (the process environment in the daemon, a fixture in tests).
// Errors name the URL, or the profile or file at fault. A URL ending in '/' names a folder
// (no leaf); otherwise its last segment is the leaf and the root is the folder holding it:
// s3://b/train/ is root "train/", s3://b/train/set.tar is root "train/", leaf "set.tar".
Result<Location> ResolveLocation(std::string_view url, const LocationOptions& options,
                                 const std::map<std::string, std::string>& env);

// True for s3://, http:// and https:// sources.
bool IsRemoteUrl(std::string_view source);

struct ObjectInfo {
  std::string name;  // relative to the root
  uint64_t size = 0;
  std::string etag;  // as the store sent it, quotes included
};

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
  class Impl;
  StoreConfig config_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufs::remote
