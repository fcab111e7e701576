// What an answer means: the checks every response passes before its bytes are trusted,
// and the errno and message of every failure. Pure functions of a Reply, so each rule is
// tested without a server.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "source/remote/address/exchange.h"
#include "source/remote/address/store_config.h"

namespace gpufs::remote {

struct ContentRange {
  uint64_t first = 0;  // inclusive
  uint64_t last = 0;   // inclusive
  uint64_t total = 0;  // the object's size
};

// "bytes FIRST-LAST/TOTAL" exactly, with first <= last < total; errors (EIO) say why.
Result<ContentRange> ParseContentRange(std::string_view header);

// True for answers worth another attempt: 5xx, 429, and S3's SlowDown whatever its status.
bool IsRetryableStatus(long status, std::string_view error_body);

// "HTTP 403, SignatureDoesNotMatch: The request signature ...": the status, and the
// store's own code and message when the body is an S3 error document.
std::string DescribeStatus(const Reply& reply);

// The error of a non-2xx answer: 404 ENOENT, 403 and 401 EACCES, else EIO, with the store's own
// code and message when the body is an S3 error document.
Error StatusError(const Reply& reply, std::string_view verb, std::string_view object);

// A ranged GET's answer: `length` bytes from `offset`, of the object the mount saw when
// `expected` is set. The byte count, or EIO naming the object and what is wrong.
Result<size_t> CheckRangeReply(const Reply& reply, std::string_view object, uint64_t offset,
                               size_t length, const std::optional<ObjectInfo>& expected);

// A HEAD's answer: the object's size and ETag.
Result<ObjectInfo> CheckHeadReply(const Reply& reply, std::string_view object,
                                  const std::string& name);

// The answer to a GET of `Range: bytes=0-0`: the object's size (Content-Range's total) and
// ETag. A 200 means the server ignores Range requests: EOPNOTSUPP, saying so.
Result<ObjectInfo> CheckProbeReply(const Reply& reply, std::string_view object,
                                   const std::string& name);

// A whole object's answer (GET without a range, into a text sink of `max_bytes`).
Result<std::string> CheckWholeReply(Reply reply, std::string_view object, size_t max_bytes);

}  // namespace gpufs::remote
