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

#include "base/error.h"
#include "dataset/catalog.h"
#include "dataset/compressed/decode_plan.h"
#include "dataset/format/native_index.h"
#include "dataset/format/progress.h"
#include "dataset/format/tar.h"
#include "dataset/format/tree_shape.h"
#include "dataset/open/dataset.h"
#include "dataset/open/tar_dataset.h"

namespace gpufs {

Result<Dataset> OpenDataset(const std::filesystem::path& src, const OpenOptions& options);

// The mytar dataset at `dir` parsed from its text, ignoring any index.gpufs.
Result<Dataset> OpenMytarText(const std::filesystem::path& dir);

// The index beside the data at `data` (an archive, metadata.txt) named `index`.
IndexPlace BesideData(const std::filesystem::path& data, const std::filesystem::path& index);

// The first of `candidates` that holds an index of `archive` made from the archive as
// `stamp` describes it now; none when all are missing, stale, of another archive or (beside
// it) not to be trusted, which `notes` then says.
std::optional<Dataset> OpenSavedTarIndex(const std::filesystem::path& archive,
                                         const std::vector<IndexPlace>& candidates,
                                         const SourceStamp& stamp, std::vector<std::string>& notes);

// Saves `d`'s index at the first of `candidates` that takes it and returns where; when
// none does, returns an empty path and says why in d.notes (the next mount lists the
// archive again).
std::filesystem::path SaveTarIndex(Dataset& d, const SourceStamp& stamp,
                                   const std::vector<IndexPlace>& candidates);

// The index of `place` when it may be opened: beside the data, only a file OpenTrustedIndex
// trusts (else why, in `notes`, and an error); in the cache, never through a link.
Result<OpenedIndex> OpenIndexAt(const IndexPlace& place, std::vector<std::string>& notes);

// An index in the private cache at `path`: its folder checked private again (as
// OpenPrivateFolder) and the file opened beneath the folder's descriptor, never through a
// link; refused, naming the folder, when the folder is no longer private to the user.
Result<OpenedIndex> OpenCachedIndex(const std::filesystem::path& path);

// A copy of `catalog` whose members carry `checksums` and `sha256` (each indexed like its
// file table; no digests when `sha256` is empty).
Catalog WithFileChecksums(const Catalog& catalog, const std::vector<uint64_t>& checksums,
                          std::vector<Sha256Digest> sha256 = {});

// The default folder for indexes of read-only archives: $XDG_CACHE_HOME/gpufs, else
// ~/.cache/gpufs (HOME, else the user's home in the password database). Private to the
// user: see OpenCacheDir.
std::filesystem::path DefaultCacheDir();

// Opens (creating 0700) the index cache folder `dir` as a private folder; its note, when it
// was tightened, goes to `notes`. An error names the folder and the fix.
Status OpenCacheDir(const std::filesystem::path& dir, std::vector<std::string>& notes);

}  // namespace gpufs
