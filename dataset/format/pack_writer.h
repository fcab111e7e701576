// Writes a native dataset: blobs of grouped members plus the native index.
//
//   OUT/index.gpufs          the catalog (see native_index.h)
//   OUT/blob-000000.gpufs    group 0: its members' bytes, each at an aligned offset
//
// Members are ordered by a seeded random permutation (as the original grouping tool
// does, so a group mixes classes) or by path, then cut into groups of at most
// `group_size` images and `group_bytes` bytes; a member larger than the byte limit gets a
// group of its own. Every member and every blob gets an XXH3-64 checksum. Blobs are
// written by several threads at once, each streaming its group from the sources, so
// reading and writing overlap. Everything goes to a hidden folder beside OUT that is
// synced and renamed to OUT at the end: an interrupted or failed pack leaves no OUT, and
// the same inputs and seed give the same bytes.
#pragma once

#include <cstdint>
#include <filesystem>

#include "base/error.h"
#include "dataset/format/pack_source.h"
#include "dataset/format/progress.h"
#include "dataset/format/tree_shape.h"

namespace gpufs {

inline constexpr uint64_t kDefaultGroupBytes = 16ull << 20;

struct PackOptions {
  uint64_t seed = 0;
  bool class_order = false;                   // order members by path instead of shuffling
  uint32_t group_size = 0;                    // most images per group; 0: no count limit
  uint64_t group_bytes = kDefaultGroupBytes;  // most bytes per group; 0: no byte limit
  uint32_t align = 0;                         // member alignment in bytes (a power of two); 0: none
  unsigned threads = 4;
  SplitMode splits = SplitMode::kAuto;
};

struct PackSummary {
  uint64_t files = 0;
  uint64_t bytes = 0;
  uint64_t groups = 0;
  size_t classes = 0;
  bool splits = false;
  std::vector<std::string> outside;  // files left out: not in a class folder
};

// Refuses an OUT that exists and is not an empty folder, or whose parent is missing; cheap,
// so callers can check before scanning a large source.
Status CheckPackOutput(const std::filesystem::path& out);

Result<PackSummary> Pack(const PackSource& source, const PackOptions& options,
                         const std::filesystem::path& out, Progress& progress);

}  // namespace gpufs
