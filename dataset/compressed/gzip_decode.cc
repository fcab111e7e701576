// Inflating a gzip stream from an access point with zlib (GzipCursor), for the reader's
// passes.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "dataset/compressed/gzip.h"

namespace gpufs {
namespace {

// zlib counts in 32-bit unsigned ints; larger buffers are handed over in slices.
constexpr size_t kMaxSlice = size_t{1} << 30;
constexpr size_t kTrailer = 8;  // CRC-32 and ISIZE

// What is wrong, in words, from zlib's message for damaged data.
std::string DamageReason(const char* msg) {
  const std::string_view m = msg ? msg : "";
  if (m == "incorrect data check") return "a member's CRC-32 does not match its data";
  if (m == "incorrect length check") return "a member's length (ISIZE) does not match its data";
  if (m.empty()) return "damaged data";
  return fmt::format("damaged data ({})", m);
}

}  // namespace

GzipCursor::GzipCursor() : strm_(std::make_unique<z_stream>()) {}

GzipCursor::~GzipCursor() {
  if (initialized_) inflateEnd(strm_.get());
}

void GzipCursor::Feed(std::span<const char> bytes, uint64_t at) {
  next_ = bytes.data();
  left_ = bytes.size();
  in_ = at;
}

void GzipCursor::Consume(size_t n) {
  next_ += n;
  left_ -= n;
  in_ += n;
}

Status GzipCursor::Start(const GzipPoint& point, std::span<const char> window) {
  if (initialized_) return Fail(EINVAL, "an inflate was started twice");
  const bool member = point.member != 0;
  if (point.bits > 7 || (member && point.bits != 0)) {
    return Fail(EINVAL, "an access point with {} bits", point.bits);
  }
  if (inflateInit2(strm_.get(), member ? 31 : -15) != Z_OK) {
    return Fail(ENOMEM, "zlib cannot start an inflate");
  }
  initialized_ = true;
  raw_ = !member;
  out_ = point.out;
  mode_ = Mode::kInflate;
  if (member) return Ok{};
  if (window.size() != kGzipWindow) return Fail(EINVAL, "an access point without its window");
  if (point.bits != 0) {
    if (left_ == 0) return Fail(EIO, "no input before the access point");
    const auto byte = static_cast<unsigned char>(*next_);
    Consume(1);
    if (inflatePrime(strm_.get(), point.bits, byte >> (8 - point.bits)) != Z_OK) {
      return Fail(EINVAL, "zlib refused the access point's bits");
    }
  }
  if (inflateSetDictionary(strm_.get(), reinterpret_cast<const Bytef*>(window.data()),
                           static_cast<uInt>(window.size())) != Z_OK) {
    return Fail(EINVAL, "zlib refused the access point's window");
  }
  return Ok{};
}

Result<size_t> GzipCursor::Step(char* out, size_t room, bool at_blocks, bool eof) {
  boundary_ = false;
  if (!initialized_) return Fail(EINVAL, "an inflate was not started");
  switch (mode_) {
    case Mode::kInflate:
      return Inflate(out, room, at_blocks, eof);
    case Mode::kTrailer: {
      const size_t n = std::min(left_, trailer_left_);
      Consume(n);
      trailer_left_ -= n;
      if (trailer_left_ == 0) {
        mode_ = Mode::kBetween;
      } else if (eof && left_ == 0) {
        truncated_ = true;
        return Fail(EIO, "the stream ends in a member's trailer");
      }
      return size_t{0};
    }
    case Mode::kBetween:
    case Mode::kZeros: {
      Status s = Between(eof);
      if (!s) return s.error();
      return size_t{0};
    }
    case Mode::kEnd:
      break;
  }
  return size_t{0};
}

Result<size_t> GzipCursor::Inflate(char* out, size_t room, bool at_blocks, bool eof) {
  z_stream& s = *strm_;
  const auto in_slice = static_cast<uInt>(std::min(left_, kMaxSlice));
  const auto out_slice = static_cast<uInt>(std::min(room, kMaxSlice));
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(next_));
  s.avail_in = in_slice;
  s.next_out = reinterpret_cast<Bytef*>(out);
  s.avail_out = out_slice;
  const int ret = inflate(&s, at_blocks ? Z_BLOCK : Z_NO_FLUSH);
  Consume(in_slice - s.avail_in);
  const size_t produced = out_slice - s.avail_out;
  out_ += produced;
  switch (ret) {
    case Z_OK:
      // A boundary before the member's last block: the last one ends at its trailer.
      boundary_ = at_blocks && (s.data_type & 128) && !(s.data_type & 64);
      bits_ = s.data_type & 7;
      return produced;
    case Z_STREAM_END:
      mode_ = raw_ ? Mode::kTrailer : Mode::kBetween;
      trailer_left_ = raw_ ? kTrailer : 0;
      return produced;
    case Z_BUF_ERROR:
      if (eof && left_ == 0) {
        truncated_ = true;
        return Fail(EIO, "the stream ends in the middle of a member");
      }
      return produced;
    case Z_MEM_ERROR:
      return Fail(ENOMEM, "out of memory inflating");
    default:
      return Fail(EIO, "{}", DamageReason(s.msg));
  }
}

// After a member's end: another member, zero padding to the end, or the end.
Status GzipCursor::Between(bool eof) {
  if (mode_ == Mode::kBetween) {
    if (left_ == 0) {
      if (eof) mode_ = Mode::kEnd;
      return Ok{};
    }
    if (*next_ == 0) {
      mode_ = Mode::kZeros;
    } else if (*next_ != '\x1f') {
      return Fail(EIO, "trailing garbage after the last member");
    } else {
      if (inflateReset2(strm_.get(), 31) != Z_OK) return Fail(EIO, "zlib cannot restart");
      raw_ = false;
      mode_ = Mode::kInflate;
      member_start_ = true;
      return Ok{};
    }
  }
  const char* other = std::find_if(next_, next_ + left_, [](char c) { return c != 0; });
  Consume(static_cast<size_t>(other - next_));
  if (left_ > 0) return Fail(EIO, "trailing garbage after the zeros that follow the last member");
  if (eof) mode_ = Mode::kEnd;
  return Ok{};
}

}  // namespace gpufs
