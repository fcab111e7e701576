// How the groups of a compressed archive are made from the archive's stored bytes.
//
// A compressed archive is served through its decoded space: the byte offsets its catalog's
// groups and members use. Where bytes lie in the archive as they are served (a zip's stored
// members), decoded offsets are the archive's own and those groups are read as they lie.
// The rest (a zip's deflated members, every byte of a .tar.gz) lie in decoded space past
// them, and each such group has a recipe here: which stored range to read and how to turn
// it into the group's bytes. A group is decoded whole, once, when it loads (decode_group.h).
//
//   zip      a recipe per run of members; a deflated run is laid out back to back, its
//            members' data inflated and their CRC-32s checked
//   gzip     a recipe per span between access points: where inflating may start (the
//            compressed offset, the bits of the byte before it, the 32 KiB the output
//            ended with there), how much output to skip, and where the compressed bytes
//            needed end
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace gpufs {

enum class DecodeKind : uint8_t {
  kAsStored = 0,  // bytes served as they lie (decoded offset == stored offset)
  kZip = 1,       // members of a zip, each stored or deflated, laid back to back
  kGzip = 2,      // a span of a gzip stream (one member or several)
};

// A member of a zip recipe: where its stored data lie in the archive, how it is stored,
// and what it must decode to.
struct ZipPart {
  uint64_t data_offset = 0;  // of the member's stored data, in the archive
  uint64_t stored_size = 0;
  uint64_t size = 0;  // decoded
  uint32_t crc32 = 0;
  uint16_t method = 0;  // 0 stored, 8 deflated
  uint16_t reserved = 0;
};
static_assert(sizeof(ZipPart) == 32);

// Where inflating a gzip stream may start. `window` indexes DecodePlan::windows (32 KiB
// each); kNoWindow where none is needed: the start of a gzip member, which `member` says
// (then `in` is the offset of the member's header).
struct GzipPoint {
  uint64_t out = 0;  // decoded offset
  uint64_t in = 0;   // offset in the archive of the first whole byte to feed
  uint32_t window = 0;
  uint8_t bits = 0;    // 0-7 bits of the byte before `in` still to be fed
  uint8_t member = 0;  // 1: a gzip member starts at `in`
  uint16_t reserved = 0;
};
static_assert(sizeof(GzipPoint) == 24);
inline constexpr uint32_t kNoWindow = UINT32_MAX;
inline constexpr size_t kGzipWindow = 32768;

// One group's recipe, keyed by its decoded range.
struct DecodeRecipe {
  uint64_t offset = 0;  // decoded range: [offset, offset + size)
  uint64_t size = 0;
  uint64_t stored_offset = 0;  // the archive's bytes the recipe reads
  uint64_t stored_size = 0;
  DecodeKind kind = DecodeKind::kAsStored;
  uint8_t reserved[3] = {};
  uint32_t first = 0;  // zip: the first of `count` parts; gzip: the point to start from
  uint32_t count = 0;  // zip: parts; gzip: 0
  uint32_t reserved2 = 0;
};
static_assert(sizeof(DecodeRecipe) == 48);

// The recipes of one blob of a catalog, sorted by decoded offset and not overlapping.
struct DecodePlan {
  uint32_t blob = 0;
  DecodeKind kind = DecodeKind::kAsStored;  // kZip or kGzip
  uint64_t stored_size = 0;                 // the archive's size
  uint64_t decoded_size = 0;                // the end of decoded space
  std::vector<DecodeRecipe> recipes;
  std::vector<ZipPart> parts;
  std::vector<GzipPoint> points;
  std::vector<char> windows;  // kGzipWindow bytes per window

  // The recipe whose decoded range holds `offset`, or null.
  const DecodeRecipe* Find(uint64_t offset) const;
  std::span<const char> Window(uint32_t index) const {
    return {windows.data() + size_t{index} * kGzipWindow, kGzipWindow};
  }
};

// The path of the member whose decoded bytes start at a decoded offset, for messages;
// empty when unknown.
using MemberNamer = std::function<std::string(uint64_t decoded_offset)>;

}  // namespace gpufs
