// Inflating a gzip stream from an access point (GzipCursor), and a group's bytes made from
// its recipe (DecodeGzipRecipe).
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dataset/compressed/gzip.h"

namespace gpufs {
namespace {

// zlib counts in 32-bit unsigned ints; larger buffers are handed over in slices.
constexpr size_t kMaxSlice = size_t{1} << 30;
constexpr size_t kTrailer = 8;  // CRC-32 and ISIZE
// Where the skipped output before a recipe's range goes.
constexpr size_t kScratch = 64 << 10;

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

namespace {

// The access point `recipe` starts from, once the plan is found to hold it whole and
// `recipe` to agree with it.
Result<const GzipPoint*> StartOf(const DecodePlan& plan, const DecodeRecipe& recipe,
                                 std::string_view label) {
  if (recipe.first >= plan.points.size()) {
    return Fail(EIO, "cannot decode {}: the plan names access point {} of {}", label, recipe.first,
                plan.points.size());
  }
  const GzipPoint& p = plan.points[recipe.first];
  const size_t windows = plan.windows.size() / kGzipWindow;
  if (!p.member && p.window >= windows) {
    return Fail(EIO, "cannot decode {}: access point {} names window {} of {}", label, recipe.first,
                p.window, windows);
  }
  if (p.bits > 7 || (p.member && p.bits != 0) || (p.bits && p.in == 0)) {
    return Fail(EIO, "cannot decode {}: access point {} has {} bits at byte {}", label,
                recipe.first, p.bits, p.in);
  }
  if (recipe.stored_offset != p.in - (p.bits ? 1 : 0)) {
    return Fail(EIO, "cannot decode {}: a group's bytes start at {}, not at its access point's {}",
                label, recipe.stored_offset, p.in - (p.bits ? 1 : 0));
  }
  if (recipe.offset < p.out) {
    return Fail(EIO, "cannot decode {}: a group at {} starts before its access point at {}", label,
                recipe.offset, p.out);
  }
  return &p;
}

// Decoding a group: the recipe's output, and what an error says.
class GroupDecoder {
 public:
  GroupDecoder(std::string_view label, const MemberNamer& name_of)
      : label_(label), name_of_(name_of) {}

  GzipCursor& cursor() { return cursor_; }

  // Fills the `size` bytes at `out` with the stream's next output, `after` more bytes
  // wanted after them (for the message when the stream ends first).
  Status Fill(char* out, size_t size, uint64_t after) {
    for (size_t done = 0; done < size;) {
      if (cursor_.ended()) return Early(size - done + after);
      auto n = cursor_.Step(out + done, size - done, false, true);
      if (!n) return cursor_.truncated() ? Early(size - done + after) : Damaged(n.error());
      done += *n;
    }
    return Ok{};
  }

  // Inflates past the next `size` bytes of output, `after` more wanted after them.
  Status Skip(uint64_t size, uint64_t after) {
    if (size == 0) return Ok{};
    std::vector<char> scratch(static_cast<size_t>(std::min<uint64_t>(size, kScratch)));
    while (size > 0) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(size, scratch.size()));
      Status s = Fill(scratch.data(), n, size - n + after);
      if (!s) return s;
      size -= n;
    }
    return Ok{};
  }

  Error Damaged(const Error& why) const {
    return Error{why.code, fmt::format("cannot decode {}: at byte {}{}: {}", label_, cursor_.in(),
                                       Member(), why.message)};
  }

 private:
  Error Early(uint64_t missing) const {
    return Fail(EIO,
                "cannot decode {}: at byte {}{}: the stream ends {} bytes early: damaged, "
                "or changed since it was indexed",
                label_, cursor_.in(), Member(), missing);
  }

  std::string Member() const {
    const std::string name = name_of_ ? name_of_(cursor_.out()) : std::string();
    return name.empty() ? name : fmt::format(" (in {})", name);
  }

  GzipCursor cursor_;
  std::string_view label_;
  const MemberNamer& name_of_;
};

}  // namespace

Status DecodeGzipRecipe(const DecodePlan& plan, const DecodeRecipe& recipe,
                        std::span<const char> stored, std::span<char> out, std::string_view label,
                        const MemberNamer& name_of) {
  auto point = StartOf(plan, recipe, label);
  if (!point) return point.error();
  const GzipPoint& p = **point;
  GroupDecoder decoder(label, name_of);
  decoder.cursor().Feed(stored, recipe.stored_offset);
  Status s = decoder.cursor().Start(p, p.member ? std::span<const char>() : plan.Window(p.window));
  if (!s) return decoder.Damaged(s.error());
  s = decoder.Skip(recipe.offset - p.out, out.size());
  if (!s) return s;
  return decoder.Fill(out.data(), out.size(), 0);
}

}  // namespace gpufs
