// A tar listing as a dataset: its tree, its groups and its notes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "dataset/catalog.h"
#include "dataset/format/native_index.h"
#include "dataset/format/tar.h"
#include "dataset/format/tree_shape.h"
#include "dataset/open/dataset.h"

namespace gpufs {

// The dataset of the tar archive `archive` (a path or an object's name; its file name is
// the blob's name) from its listing, not yet saved. `stamp` identifies the archive. The
// listing's entries and paths are released once the catalog holds them (at 14 M files they
// take some 800 MB); its counts stay.
// With `cuts` (sorted offsets), a group starts at the first member at or past each cut and
// nowhere else, whatever `group_bytes` says: a compressed archive's groups follow where
// its decoding can start.
Result<Dataset> TarDataset(const std::filesystem::path& archive, TarListing& listing,
                           const SourceStamp& stamp, uint64_t group_bytes,
                           const std::vector<uint64_t>* cuts = nullptr);

// What a tar listing holds, shaped as a tree by ShapeTreeOfViews over its paths, as a
// catalog: groups are runs of members that lie next to each other in the archive, up to
// `group_bytes` each. Each file's tree path goes straight into the builder's arena, with
// no per-member spec record or string; the listing's entries and paths (and the shape's
// classes) are released before the catalog is built, so they are never held beside it.
Result<Catalog> TarCatalog(const std::filesystem::path& archive, TarListing& listing,
                           TreeShape& shape, uint64_t group_bytes,
                           const std::vector<uint64_t>* cuts = nullptr);

}  // namespace gpufs
