// The decode plans of a compressed archive, saved beside its native index as `<index>.plan`
// (docs/native_index.md, "Decode plans"), so that a mount of an unchanged zip or .tar.gz
// neither lists the archive again nor inflates it to find its access points.
//
// The file is a 72-byte header, a record per plan, then each plan's arrays (recipes, zip
// parts, gzip points, windows), every one at an 8-byte boundary and stored as the structs of
// decode_plan.h are in memory (they have no padding, and their reserved fields are zero):
//
//   header   magic "GPUFSPLN", u32 version, u32 header size, u64 file size, u64 XXH3-64 of
//            the body, u64 the index's body checksum, u64 size and i64 mtime_ns of the
//            archive, u64 plan count, u64 XXH3-64 of the header with this field zero
//   plan     u32 blob, u8 kind, 3 zero bytes, u64 stored size, u64 decoded size, then
//            {u64 offset, u64 count} of its recipes, parts, points and window bytes
//
// A plan file is untrusted like the index: its checksums prove only that it is whole, so
// reading it also checks every range and reference a decode follows (ReadPlanFile), and a
// plan that was read can be decoded without a bounds check of its own.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "dataset/compressed/decode_plan.h"
#include "dataset/format/native_index.h"

namespace gpufs {

inline constexpr std::string_view kPlanFileSuffix = ".plan";
inline constexpr uint32_t kPlanFileVersion = 1;
// The code of a plan file that is whole but not this one's to use: of another version, or
// made with another index or of another state of the archive. It is made again, quietly;
// any other refusal is damage, worth a warning.
inline constexpr int kStalePlanFile = ESTALE;
// The largest decoded range one recipe may describe: a group is decoded whole into memory.
inline constexpr uint64_t kMaxRecipeSize = uint64_t{1} << 30;

// The bytes of the plan file for `plans` (one per compressed blob of a catalog, written in
// blob order), bound to the index it goes with by `index_checksum` (the index header's body
// checksum) and to the archive by `source` (its size and mtime as the index records them).
// Reserved fields are written as zero whatever `plans` holds.
std::string PlanFileBytes(const std::vector<DecodePlan>& plans, uint64_t index_checksum,
                          const SourceStamp& source);

// The plans in `bytes`, read from the file `label` names, in blob order. Refused with an
// error naming the file and what is wrong (the first bad record, "recipe 12 of plan 0 reads
// past the archive's end") when the bytes are not a plan file or are damaged (EINVAL), or
// are of another version or bound to another index or archive state (kStalePlanFile).
// `blob_sizes`: the catalog's blobs' sizes as the index says them; a plan must name one of
// them and agree on its size.
Result<std::vector<DecodePlan>> ReadPlanFile(std::string_view bytes, std::string_view label,
                                             uint64_t index_checksum, const SourceStamp& source,
                                             const std::vector<uint64_t>& blob_sizes);

}  // namespace gpufs
