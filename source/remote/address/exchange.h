// One HTTP request as the store's loop runs it, and the answer it hands back. The loop
// knows transport, sinks and retries; what a status or a header means for a read, a HEAD
// or a listing is decided above it (responses.h), where the request's purpose is known.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"

namespace gpufs::remote {

// The final HTTP answer to an exchange: a status the loop does not retry, or the last one.
struct Reply {
  long status = 0;
  std::string etag;           // the ETag header, as sent
  std::string content_range;  // the Content-Range header, trimmed
  std::optional<uint64_t> content_length;
  size_t body_bytes = 0;  // of a 2xx body, written to the sink
  // A 2xx body for a text sink; for any other status, the start of the error body.
  std::string text;
  bool overflow = false;     // the 2xx body was longer than the sink: the transfer stopped
  bool not_partial = false;  // a 2xx other than 206 came for a `partial_only` exchange
  // S3's x-amz-bucket-region header: the bucket's region, in a wrong-region answer (region.h)
  std::string bucket_region;
};

struct Exchange {
  std::string object;  // as messages name it (ObjectStore::Describe)
  std::string verb;    // "read", "stat", "list": messages read "cannot <verb> <object>"
  std::string url;     // encoded, and in canonical form (query sorted) for signing
  bool head = false;
  std::vector<std::string> headers;  // "Name: value"
  // A byte range "FIRST-LAST" sent as curl's own Range header, which SigV4 leaves unsigned:
  // a caching proxy may then ask the store for a wider range with the same signature.
  std::string range;
  // A Cookie header sent by curl itself, which SigV4 leaves unsigned (a peer's secret).
  std::string cookie;
  unsigned max_attempts = 0;  // 0: the loop's; a peer gets one, then the next peer
  bool via_peer = false;      // counted as a peer's request and bytes, not the store's
  // A reader waits on it: started before every queued exchange that is not, even when all
  // `connections` are busy (up to TransferLoop's urgent allowance).
  bool urgent = false;
  // When the read this request serves began, which its retry deadline counts from (a block
  // that peers failed to send); unset: its first attempt.
  std::optional<std::chrono::steady_clock::time_point> since;
  // Where a 2xx body goes: `capacity` bytes at `buffer`, or else Reply::text, up to
  // `max_text` bytes. More than that stops the transfer (Reply::overflow).
  char* buffer = nullptr;
  size_t capacity = 0;
  size_t max_text = 0;
  // Only a 206 body may enter the sink: a range not at the object's start must not be
  // answered with the whole object written from the buffer's start.
  bool partial_only = false;
  // Runs once on the loop's thread: the final Reply, or the transport's error (EIO after
  // the retries, ECANCELED when the store closes).
  std::function<void(Result<Reply>)> done;
};

}  // namespace gpufs::remote
