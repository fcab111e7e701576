// Gzip streams read at random.
//
// A gzip stream can only be inflated front to back, so the first mount inflates it once,
// while the tar walker lists it through a GzipReader, and records where inflating may start
// again later: access points (decode_plan.h's GzipPoint). A point is either the start of a
// gzip member (free: it needs nothing but the member's header, and every member of a bgzip
// or pigz stream is one) or a deflate block boundary with the 32 KiB of output before it
// (the window) and the bits of the byte before it still unread, as zlib's zran.c records
// them. A point is wanted after each multiple of `span` bytes of output; a member start
// within the span after the multiple is preferred to a block boundary.
//
// Checkpoints (decoded offset, compressed bytes consumed) taken every 256 KiB of output and
// at each access point say how far into the archive the bytes needed for a decoded range
// reach, so that a group is read from the archive in one ranged read with little
// over-read (none, for a group that ends where the next point starts). DecodeGzipRecipe then
// makes a group's bytes from those stored bytes alone.
//
// Every member's CRC-32 and length (its trailer) are checked by the first pass; a group's
// decoding checks those of members it inflates whole. Zero bytes after the last member are
// ignored, as gzip ignores them; anything else after it is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "dataset/compressed/decode_plan.h"
#include "dataset/format/range_reader.h"

struct z_stream_s;

namespace gpufs {

// The size() of a GzipReader until the stream's end has been seen.
inline constexpr uint64_t kUnknownSize = uint64_t{1} << 62;

// True when the reader's bytes start as a deflated gzip member does (1f 8b 08).
bool LooksLikeGzip(RangeReader& reader);

// A RangeReader over the decompressed bytes of a gzip file, inflating as it is read, which
// records the stream's access points and checkpoints on its first pass.
//
// Calls are never concurrent, but may come from different threads one after another (the
// tar walker reads one chunk ahead on another thread).
class GzipReader : public RangeReader {
 public:
  // Points are recorded after each multiple of `span` decoded bytes.
  GzipReader(RangeReader& compressed, uint64_t span);
  ~GzipReader() override;
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  // kUnknownSize until the end was reached, then the decoded size.
  uint64_t size() const override;
  // The compressed reader's label.
  const std::string& label() const override;
  // Forward reads inflate on from where the last one stopped (skipping the output
  // between); a read before that restarts from the last access point at or before
  // `offset`. Short only at the stream's end.
  Result<size_t> ReadAt(uint64_t offset, size_t length, char* out) override;

  // Inflates to the end (recording points), checking every member's trailer.
  Status Finish();
  // The decoded size; after Finish.
  uint64_t decoded_size() const;
  // Bytes of the archive the first pass has consumed so far, for progress. Any thread.
  uint64_t compressed_read() const;
  // Sorted by `out`; the first is the first member's start, at 0.
  const std::vector<GzipPoint>& points() const;
  // kGzipWindow bytes per window, indexed by GzipPoint::window; meant for after Finish.
  // Afterwards a backward read restarts only from member starts, and points recorded later
  // (were the end not reached) are member starts only.
  std::vector<char> TakeWindows();
  // Where in the archive the compressed bytes needed to produce the decoded bytes before
  // `decoded_end` end at most; never past the archive's size.
  uint64_t StoredEnd(uint64_t decoded_end) const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Makes `recipe`'s decoded bytes in `out` from `stored`, the archive's bytes
// [recipe.stored_offset, recipe.stored_offset + stored.size()), starting at
// plan.points[recipe.first]. Reads nothing outside `stored` and writes nothing outside
// `out`, whatever the plan says. An error names `label`, the compressed offset, and the
// member `name_of` gives for the decoded offset reached.
Status DecodeGzipRecipe(const DecodePlan& plan, const DecodeRecipe& recipe,
                        std::span<const char> stored, std::span<char> out, std::string_view label,
                        const MemberNamer& name_of);

// One inflate by zlib of a gzip stream from an access point onward, across member
// boundaries, for the reader's passes (DecodeGzipRecipe uses ISA-L's faster igzip, which
// cannot stop at block boundaries). The caller feeds the compressed bytes a
// piece at a time (Feed) and gives room for output (Step). From a block boundary the rest
// of that member is inflated raw (its trailer skipped unchecked); each member after it, and
// one started at its header, is inflated in gzip mode, which checks its trailer.
class GzipCursor {
 public:
  GzipCursor();
  ~GzipCursor();
  GzipCursor(const GzipCursor&) = delete;
  GzipCursor& operator=(const GzipCursor&) = delete;

  // Makes `bytes`, the archive's bytes from offset `at`, the next input; they must stay
  // valid until they are consumed (has_input() false) or the next Feed.
  void Feed(std::span<const char> bytes, uint64_t at);
  // Starts at `point`; the first byte fed must be the one at point.in, or the one before
  // it when point.bits is not 0. `window` is the point's (unused for a member start).
  Status Start(const GzipPoint& point, std::span<const char> window);
  // Inflates into the `room` bytes at `out`, stopping early at a deflate block boundary
  // when `at_blocks`; `eof`: no input follows what was fed. Returns the bytes written. An
  // error's message is the reason alone (the caller names the archive and in()).
  Result<size_t> Step(char* out, size_t room, bool at_blocks, bool eof);

  bool has_input() const { return left_ > 0; }
  bool ended() const { return mode_ == Mode::kEnd; }
  // The last error was the input ending inside a member.
  bool truncated() const { return truncated_; }
  // True once after a Step that reached the header of a member after the first: a member
  // starts at in().
  bool TakeMemberStart() { return std::exchange(member_start_, false); }
  // The last Step stopped at a deflate block boundary that is not the member's end;
  // bits() of the byte before in() are still unread there.
  bool at_boundary() const { return boundary_; }
  int bits() const { return bits_; }
  uint64_t in() const { return in_; }    // archive offset of the next byte to inflate
  uint64_t out() const { return out_; }  // decoded offset of the next byte out

 private:
  enum class Mode { kInflate, kTrailer, kBetween, kZeros, kEnd };
  Result<size_t> Inflate(char* out, size_t room, bool at_blocks, bool eof);
  Status Between(bool eof);
  void Consume(size_t n);

  std::unique_ptr<z_stream_s> strm_;
  const char* next_ = nullptr;  // the input fed and not yet consumed
  size_t left_ = 0;
  bool initialized_ = false;
  Mode mode_ = Mode::kInflate;
  bool raw_ = false;
  bool truncated_ = false;
  bool member_start_ = false;
  bool boundary_ = false;
  int bits_ = 0;
  size_t trailer_left_ = 0;
  uint64_t in_ = 0;
  uint64_t out_ = 0;
};

}  // namespace gpufs
