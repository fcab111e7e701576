#include "source/remote/transfer/responses.h"

#include <charconv>

#include "source/remote/address/s3_xml.h"

namespace gpufs::remote {
namespace {

// Digits only, no sign or space, no overflow; advances `text` past them.
std::optional<uint64_t> TakeNumber(std::string_view& text) {
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() || text[0] == '+' || text[0] == '-') {
    return std::nullopt;
  }
  text.remove_prefix(end - text.data());
  return value;
}

bool TakeChar(std::string_view& text, char c) {
  if (text.empty() || text[0] != c) return false;
  text.remove_prefix(1);
  return true;
}

std::string StoreSays(const Reply& reply) {
  const std::optional<S3Error> s3 = ParseS3Error(reply.text);
  if (!s3) return "";
  return s3->message.empty() ? s3->code : s3->code + ": " + s3->message;
}

// A changed object fails with what the mount saw and what the store has now.
Error Changed(std::string_view object, const ObjectInfo& expected, std::string_view now) {
  return Fail(EIO, "cannot read {}: it changed since mount (size {}, ETag {} then; {} now)", object,
              expected.size, expected.etag.empty() ? "none" : expected.etag, now);
}

// What the answer holds: bytes [first, end) of an object of `total` bytes. A 206 says so in
// its Content-Range; a 200 holds the whole object (which the range covered, or the sink
// would have overflowed).
struct Sent {
  uint64_t first = 0;
  uint64_t end = 0;
  uint64_t total = 0;
};

Result<Sent> SentOf(const Reply& reply, std::string_view object) {
  if (reply.status == 206) {
    Result<ContentRange> range = ParseContentRange(reply.content_range);
    if (!range.ok()) return Fail(EIO, "cannot read {}: {}", object, range.error().message);
    return Sent{range->first, range->last + 1, range->total};
  }
  if (reply.status != 200) {
    return Fail(EIO, "cannot read {}: unexpected HTTP {} to a ranged GET", object, reply.status);
  }
  if (reply.not_partial) {
    return Fail(EIO, "cannot read {}: the server ignored the Range and sent the whole object",
                object);
  }
  return Sent{0, reply.body_bytes, reply.body_bytes};
}

}  // namespace

Result<ContentRange> ParseContentRange(std::string_view header) {
  std::string_view rest = header;
  ContentRange range;
  constexpr std::string_view kUnit = "bytes ";
  if (rest.substr(0, kUnit.size()) == kUnit) {
    rest.remove_prefix(kUnit.size());
    const auto first = TakeNumber(rest);
    const auto last = first && TakeChar(rest, '-') ? TakeNumber(rest) : std::nullopt;
    const auto total = last && TakeChar(rest, '/') ? TakeNumber(rest) : std::nullopt;
    if (total && rest.empty()) {
      range = ContentRange{*first, *last, *total};
      if (range.first <= range.last && range.last < range.total) return range;
      return Fail(EIO, "Content-Range '{}' is not a range inside the object", header);
    }
  }
  return Fail(EIO, "Content-Range '{}' is not 'bytes FIRST-LAST/TOTAL'", header);
}

bool IsRetryableStatus(long status, std::string_view error_body) {
  if (status >= 500 || status == 429) return true;
  if (status < 400 || error_body.find("SlowDown") == std::string_view::npos) return false;
  const std::optional<S3Error> s3 = ParseS3Error(error_body);
  return s3 && s3->code == "SlowDown";
}

std::string DescribeStatus(const Reply& reply) {
  const std::string says = StoreSays(reply);
  return says.empty() ? fmt::format("HTTP {}", reply.status)
                      : fmt::format("HTTP {}, {}", reply.status, says);
}

Error StatusError(const Reply& reply, std::string_view verb, std::string_view object) {
  const std::string detail = DescribeStatus(reply);
  if (reply.status == 404)
    return Fail(ENOENT, "cannot {} {}: not found ({})", verb, object, detail);
  if (reply.status == 403)
    return Fail(EACCES, "cannot {} {}: access denied ({})", verb, object, detail);
  if (reply.status == 401) {
    return Fail(EACCES,
                "cannot {} {}: the server wants credentials or refused them ({}); give them "
                "as https://USER:PASSWORD@HOST/... or in ~/.netrc",
                verb, object, detail);
  }
  return Fail(EIO, "cannot {} {}: the server answered {}", verb, object, detail);
}

Result<size_t> CheckRangeReply(const Reply& reply, std::string_view object, uint64_t offset,
                               size_t length, const std::optional<ObjectInfo>& expected) {
  if (reply.status == 412 && expected) {
    return Changed(object, *expected, "If-Match failed: the store answered 412");
  }
  if (reply.status < 200 || reply.status > 299) return StatusError(reply, "read", object);
  if (reply.overflow) {
    return Fail(EIO, "cannot read {}: the server sent more than the {} bytes asked", object,
                length);
  }
  const Result<Sent> sent = SentOf(reply, object);
  if (!sent.ok()) return sent.error();
  if (expected && (sent->total != expected->size ||
                   (!expected->etag.empty() && reply.etag != expected->etag))) {
    return Changed(object, *expected, fmt::format("size {}, ETag {}", sent->total, reply.etag));
  }
  const uint64_t end = offset + length;
  if (end > sent->total) {
    return Fail(EIO, "cannot read {}: bytes {}-{} asked, the object holds {}", object, offset,
                end - 1, sent->total);
  }
  if (sent->first != offset || sent->end != end) {
    return Fail(EIO, "cannot read {}: bytes {}-{} asked, {}-{} sent", object, offset, end - 1,
                sent->first, sent->end - 1);
  }
  if (reply.body_bytes != length) {
    return Fail(EIO, "cannot read {}: {} bytes received of {}", object, reply.body_bytes, length);
  }
  return length;
}

Result<ObjectInfo> CheckHeadReply(const Reply& reply, std::string_view object,
                                  const std::string& name) {
  if (reply.status != 200) {
    return reply.status >= 200 && reply.status < 300
               ? Fail(EIO, "cannot stat {}: unexpected HTTP {} to a HEAD", object, reply.status)
               : StatusError(reply, "stat", object);
  }
  if (!reply.content_length) {
    return Fail(EIO, "cannot stat {}: the answer has no Content-Length", object);
  }
  return ObjectInfo{name, *reply.content_length, reply.etag};
}

Result<ObjectInfo> CheckProbeReply(const Reply& reply, std::string_view object,
                                   const std::string& name) {
  if (reply.status == 200) {
    return Fail(EOPNOTSUPP,
                "cannot use {}: the server ignores Range requests (it answered 200 with the "
                "whole file to a ranged GET); serve it with nginx or another server that "
                "supports ranges (nginx: max_ranges must not be 0)",
                object);
  }
  if (reply.status != 206) {
    return reply.status >= 200 && reply.status < 300
               ? Fail(EIO, "cannot stat {}: unexpected HTTP {} to a ranged GET", object,
                      reply.status)
               : StatusError(reply, "stat", object);
  }
  Result<ContentRange> range = ParseContentRange(reply.content_range);
  if (!range.ok()) return Fail(EIO, "cannot stat {}: {}", object, range.error().message);
  return ObjectInfo{name, range->total, reply.etag};
}

Result<std::string> CheckWholeReply(Reply reply, std::string_view object, size_t max_bytes) {
  if (reply.status != 200) {
    return reply.status >= 200 && reply.status < 300
               ? Fail(EIO, "cannot read {}: unexpected HTTP {} to a GET", object, reply.status)
               : StatusError(reply, "read", object);
  }
  if (reply.overflow) {
    return Fail(EFBIG, "cannot read {}: larger than the {} bytes allowed", object, max_bytes);
  }
  return std::move(reply.text);
}

}  // namespace gpufs::remote
