// Zip archives served in place: a zip's stored members are read where they lie, and its
// deflated ones are inflated a group at a time (decode_plan.h).
//
// The listing reads the central directory (zip64 included), then every listed member's
// local header, since the local header's length (its name and extra field, which often
// differ from the central ones) says where the member's data start, and since a local
// header that disagrees with its central entry means a damaged or forged archive. Names
// go through the tar rules (name_rules.h); the last entry of a path in the central
// directory is what extraction leaves there. Folders are implied by paths; symbolic links
// and other entries with no bytes to serve are skipped and counted. What gpufs cannot
// serve is refused, naming the member and the fix: encryption, methods other than stored
// and deflated, archives split over several disks.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "dataset/compressed/decode_plan.h"
#include "dataset/format/progress.h"
#include "dataset/format/range_reader.h"
#include "dataset/format/tar.h"

namespace gpufs {

struct ZipListing {
  // Regular files: each entry's path normalized as a tar's, its offset the first byte of
  // the member's stored data in the archive, its size the decoded size; in archive order
  // (by offset). Replaced paths are dropped (the last in the central directory wins,
  // counted in files.replaced), symbolic links and other entries with no bytes skipped
  // (files.skipped), folder entries ("name/") implied rather than listed.
  TarListing files;
  // Indexed like files.entries: where each member's stored data lie, how they are stored
  // (method 0 or 8) and what they decode to.
  std::vector<ZipPart> parts;
};

// True when the archive starts with a local header, or is an empty zip (nothing but an
// end-of-central-directory record).
bool LooksLikeZip(RangeReader& reader);

// Lists the archive. Reads the central directory in pieces (14 M entries are some 1 GB of
// it) and the local headers in increasing offset order, those close together in one read:
// a remote archive pays a round trip per read, so with `more` (tar.h's ReaderFactory) runs
// of members are read by up to `parallel` readers at once. With `progress`: total_bytes the
// archive's size, bytes as the headers are read, files per file listed.
Result<ZipListing> ListZip(RangeReader& reader, Progress* progress = nullptr,
                           const ReaderFactory& more = {}, unsigned parallel = 1);

// Makes `recipe`'s decoded bytes in `out`: its parts [first, first + count) of plan.parts
// back to back, stored ones copied and deflated ones inflated, each part's CRC-32 checked.
// `stored` is the archive's bytes [recipe.stored_offset, + recipe.stored_size). Reads and
// writes only inside `stored` and `out` whatever the plan says, since a plan is read from a
// file. An error names `label`, the member (by `name_of` where it knows it) and what is
// wrong. May be called from any thread.
Status DecodeZipRecipe(const DecodePlan& plan, const DecodeRecipe& recipe,
                       std::span<const char> stored, std::span<char> out, std::string_view label,
                       const MemberNamer& name_of);

}  // namespace gpufs
