// The vocabulary of a remote store, shared by every room of source/remote/: where a store
// is and how to reach it (StoreConfig), the keys a request is signed with, the deadlines of
// a transfer and what a store says of an object. Plain data: the credential chain fills
// `credentials`, the transfers read the rest.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "source/remote/address/peers.h"

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

// The defaults here are the mount's (gpufsd --connect-timeout and the others).
struct TransferDeadlines {
  std::chrono::milliseconds connect{3'000};
  std::chrono::milliseconds idle{10'000};       // no byte for this long: broken
  std::chrono::milliseconds allowance{10'000};  // the total's part that is not size
  uint64_t floor_rate = 1 << 20;                // bytes per second a transfer must beat
};

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

struct ObjectInfo {
  std::string name;  // relative to the root
  uint64_t size = 0;
  std::string etag;  // as the store sent it, quotes included
};

}  // namespace gpufs::remote
