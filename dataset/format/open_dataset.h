// Opens whatever a user points gpufsd at, checks it, and returns its catalog:
//
//   DIR/index.gpufs + blobs            a native pack
//   DIR/metadata.txt + blobs           the mytar layout (DIR may be its parent); its
//                                      index.gpufs, when `gpufsd index` wrote one and it
//                                      is not older than metadata.txt, spares the parse
//   ARCHIVE.tar                        a tar of an ImageFolder tree or of per-class tars
//
// Every blob is checked for presence and length before anything is served.
#pragma once

#include <time.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "dataset/catalog.h"
#include "dataset/error.h"
#include "dataset/format/native_index.h"
#include "dataset/format/tar.h"
#include "dataset/format/tree_shape.h"

namespace gpufs {

struct OpenOptions {
  std::optional<uint32_t> group_size;  // picks a mytar group-size folder
  std::filesystem::path cache_dir;     // where tar indexes go when beside is read-only
  uint64_t tar_group_bytes = 16ull << 20;
};

struct Dataset {
  std::filesystem::path dir;  // blob names are relative to it
  Catalog catalog;
  std::vector<BlobInfo> blobs;     // expected size (at least) and checksum of each blob
  std::string format;              // "native", "mytar", "mytar+index", "tar"
  std::filesystem::path index;     // the file the catalog came from
  struct timespec mtime {};        // shown as every node's time
  std::vector<std::string> notes;  // worth telling the user: a stale index, skipped entries
};

Result<Dataset> OpenDataset(const std::filesystem::path& src, const OpenOptions& options);

// The mytar dataset at `dir` parsed from its text, ignoring any index.gpufs.
Result<Dataset> OpenMytarText(const std::filesystem::path& dir);

// The dataset of the tar archive `archive` (a path or an object's name; its file name is
// the blob's name) from its listing, not yet saved. `stamp` identifies the archive.
Result<Dataset> TarDataset(const std::filesystem::path& archive, const TarListing& listing,
                           const SourceStamp& stamp, uint64_t group_bytes);

// The first of `candidates` that holds an index of `archive` made from the archive as
// `stamp` describes it now; none when all are missing, stale or of another archive.
std::optional<Dataset> OpenSavedTarIndex(const std::filesystem::path& archive,
                                         const std::vector<std::filesystem::path>& candidates,
                                         const SourceStamp& stamp);

// Saves `d`'s index at the first of `candidates` that takes it and returns where; when
// none does, returns an empty path and says why in d.notes (the next mount lists the
// archive again).
std::filesystem::path SaveTarIndex(Dataset& d, const SourceStamp& stamp,
                                   const std::vector<std::filesystem::path>& candidates);

// What a tar listing holds, shaped as a tree, as a dataset: groups are runs of members
// that lie next to each other in the archive, up to `group_bytes` each.
DatasetSpec TarSpec(const std::filesystem::path& archive, const TarListing& listing,
                    TreeShape& shape, uint64_t group_bytes);

// A copy of `catalog` whose members carry `checksums` and `sha256` (each indexed like its
// file table; no digests when `sha256` is empty).
Catalog WithFileChecksums(const Catalog& catalog, const std::vector<uint64_t>& checksums,
                          std::vector<Sha256Digest> sha256 = {});

// The default folder for indexes of read-only archives: $XDG_CACHE_HOME/gpufs, else
// ~/.cache/gpufs.
std::filesystem::path DefaultCacheDir();

}  // namespace gpufs
