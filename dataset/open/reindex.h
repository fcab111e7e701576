// `gpufsd index`: hashes every member of a dataset in place and writes its native index,
// without rewriting a blob.
//
// - A mytar folder gets an index.gpufs beside metadata.txt (parsed no more at mount).
// - A pack (a v1 index without SHA-256 digests, or any index) gets its index rewritten
//   with the digests, its catalog and blob records kept as they were. Its bytes must
//   still match the XXH3 checksums it was packed with: a damaged blob is refused rather
//   than recorded as the truth.
//
// The SHA-256 digests are what --peers and a shared disk cache check bytes against.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "base/error.h"
#include "dataset/format/progress.h"

namespace gpufs {

struct IndexedDataset {
  std::filesystem::path path;  // the index written
  size_t files = 0;
  size_t blobs = 0;
};

// Reads the blobs on `threads` threads; `progress` counts and may cancel (EINTR, no index
// written).
Result<IndexedDataset> IndexDataset(const std::string& source, std::optional<uint32_t> group_size,
                                    unsigned threads, Progress& progress);

}  // namespace gpufs
