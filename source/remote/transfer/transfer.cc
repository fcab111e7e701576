#include "source/remote/transfer/transfer.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <string_view>

namespace gpufs::remote {
namespace {

// The start of an error answer's body kept for its message; the rest is dropped.
constexpr size_t kMaxErrorBody = 64 * 1024;

bool EqualsNoCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view TrimLine(std::string_view s) {
  while (!s.empty() && (s.back() == '\r' || s.back() == '\n' || s.back() == ' ')) {
    s.remove_suffix(1);
  }
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

}  // namespace

size_t Transfer::OnHeader(char* data, size_t size, size_t count, void* self) {
  auto* t = static_cast<Transfer*>(self);
  const std::string_view line = TrimLine(std::string_view(data, size * count));
  if (line.starts_with("HTTP/")) {  // a new answer (after a 100 Continue, say): start over
    t->reply = Reply{};
    const size_t space = line.find(' ');
    if (space != std::string_view::npos) {
      std::from_chars(line.data() + space + 1, line.data() + line.size(), t->reply.status);
    }
    return size * count;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) return size * count;
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = TrimLine(line.substr(colon + 1));
  if (EqualsNoCase(name, "ETag")) {
    t->reply.etag = std::string(value);
  } else if (EqualsNoCase(name, "x-amz-bucket-region")) {
    t->reply.bucket_region = std::string(value);
  } else if (EqualsNoCase(name, "Content-Range")) {
    t->reply.content_range = std::string(value);
  } else if (EqualsNoCase(name, "Content-Length")) {
    uint64_t length = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), length);
    if (ec == std::errc() && end == value.data() + value.size()) t->reply.content_length = length;
  }
  return size * count;
}

size_t Transfer::OnBody(char* data, size_t size, size_t count, void* self) {
  return static_cast<Transfer*>(self)->Body(data, size * count);
}

// Returning less than `n` ends the transfer (CURLE_WRITE_ERROR), which sink_stopped marks
// as the loop's own decision rather than a broken connection.
size_t Transfer::Body(const char* data, size_t n) {
  if (reply.status < 200 || reply.status > 299) {
    reply.text.append(data,
                      std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, reply.text.size())));
    return n;
  }
  const auto stop = [this](bool& why) {
    why = true;
    sink_stopped = true;
    return size_t{0};
  };
  if (exchange.partial_only && reply.status != 206) return stop(reply.not_partial);
  if (exchange.buffer != nullptr) {
    if (n > exchange.capacity - reply.body_bytes) return stop(reply.overflow);
    std::memcpy(exchange.buffer + reply.body_bytes, data, n);
  } else {
    if (n > exchange.max_text - reply.text.size()) return stop(reply.overflow);
    reply.text.append(data, n);
  }
  reply.body_bytes += n;
  (exchange.via_peer ? counters->peer_bytes : counters->bytes)
      .fetch_add(n, std::memory_order_relaxed);
  return n;
}

}  // namespace gpufs::remote
