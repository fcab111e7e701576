// The native index: one binary file describing a whole dataset, which the daemon maps
// rather than parses, so that a mount of 1.28 M files is ready in well under a second.
//
// The file is a header followed by eleven sections, each an array of fixed-size
// little-endian records starting at an 8-byte boundary (catalog.h describes the layout):
//
//   names        bytes: folder names, each folder's file-name prefix, then every file's
//                name suffix in file order, then class and blob names
//   classes      {u32 offset, u32 size} into names, indexed by class id
//   blobs        {u32 name offset, u32 name size, u64 size, u64 XXH3-64 or 0}: the blob
//                files, relative to the dataset folder (or beside the archive)
//   groups       {u32 blob, u32 0, u64 offset, u64 size}: byte ranges read together
//   dirs         the folders, breadth-first (CatalogDir, 40 bytes): each one's subfolders
//                are one contiguous, name-sorted run, and its files one run of the file
//                tables; the runs follow the folders' order
//   file_names   u32 per file and one more: where each suffix starts in names (it ends
//                where the next starts)
//   extents      {u32 group, u32 offset in group, u32 size} per file, or a size of
//                0xffffffff and the index of a wide record
//   wide         {u64 offset in group, u64 size}: the files that do not fit in u32s
//   file_classes u32 per file, only when the files of one folder differ in class (else
//                each file takes its folder's class_id)
//   checksums    u64 XXH3-64 per file, when the header's flags say the members carry them
//   sha256       the 32-byte SHA-256 per file, when the flags say so
//
// A walk touches dirs, file_names, the names and the extents: about 30 bytes per file
// with ImageNet's names. Checksums and digests are read only where bytes are checked.
// Versions 1 and 2 (a node and a 32-byte extent per file) are refused with the code
// kOldIndexVersion: a tar's saved index is rebuilt, a mytar folder's own index is passed
// over for the text (with a note), and a pack's says to run `gpufsd pack` again.
//
// The header holds a magic, a version, the size of every section, flags (whether members
// carry checksums, and SHA-256 digests), the size and mtime of the source an index was made from
// (so a stale index of a mytar or tar source is noticed), an XXH3-64 of the body and one of itself.
// Opening checks both checksums and every reference between records before anything is
// served, so a damaged or truncated index is refused instead of crashing the daemon. The
// sections are exactly the catalog's in-memory arrays: serving from the mapping needs no
// copy and no per-file memory.
#pragma once

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "base/private_files.h"
#include "dataset/catalog.h"

namespace gpufs {

inline constexpr std::string_view kNativeIndexName = "index.gpufs";
// The version this daemon reads and writes; older ones are refused with kOldIndexVersion.
inline constexpr uint32_t kNativeIndexVersion = 3;
inline constexpr int kOldIndexVersion = ESTALE;

// Size and modification time of the file an index describes (metadata.txt, a tar).
struct SourceStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const SourceStamp&) const = default;
};

struct BlobInfo {
  uint64_t size = 0;
  uint64_t checksum = 0;  // XXH3-64 of the whole blob; 0 when not computed
  int64_t mtime_ns = 0;   // modification time seen at mount (not stored); 0 when unknown
};

struct IndexInfo {
  SourceStamp source;
  uint32_t alignment = 0;                // member alignment the packer used; 0 when unaligned
  std::vector<BlobInfo> blobs;           // indexed like Catalog::blobs()
  bool tar_listed_as_extracted = false;  // a tar's listing by the current rules (a flag)
  bool decoded = false;                  // groups made by decode plans beside (a flag)
};

// Writes `catalog` as a native index at `path`: to a file created exclusively under a
// temporary name, fsync, rename, so a reader never sees a half-written index and a link
// planted at `path` is replaced, not followed. `access`: a cache's or the user's output.
Status WriteNativeIndex(const Catalog& catalog, const IndexInfo& info,
                        const std::filesystem::path& path, FileAccess access);

struct OpenedIndex {
  Catalog catalog;
  IndexInfo info;
};

// Maps and checks the index at `path` (a link at its last step is refused); the catalog
// views the mapping.
Result<OpenedIndex> OpenNativeIndex(const std::filesystem::path& path);

// As OpenNativeIndex, of the index open at `fd` (closed on return), named `path` in errors.
Result<OpenedIndex> OpenNativeIndexFd(int fd, const std::filesystem::path& path);

// The stamp of the file at `path` as it is now.
Result<SourceStamp> StampOf(const std::filesystem::path& path);

}  // namespace gpufs
