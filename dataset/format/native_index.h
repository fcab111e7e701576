// The native index: one binary file describing a whole dataset, which the daemon maps
// rather than parses, so that a mount of 1.28 M files is ready in well under a second.
//
// The file is a header followed by six sections (seven in version 2), each an array of
// fixed-size little-endian records starting at an 8-byte boundary:
//
//   names    bytes: every node, class and blob name, back to back
//   classes  {u32 offset, u32 size} into names, indexed by class id
//   blobs    {u32 name offset, u32 name size, u64 size, u64 XXH3-64 or 0}: the blob files,
//            relative to the dataset folder (or beside the archive)
//   groups   {u32 blob, u32 0, u64 offset, u64 size}: byte ranges read together
//   nodes    the catalog's nodes, breadth-first: a folder's children are one contiguous,
//            name-sorted run, so lookup is a binary search and readdir a walk
//   files    {u32 group, u32 class, u64 offset in blob, u64 size, u64 XXH3-64 or 0}
//   sha256   version 2: the 32-byte SHA-256 of each member, indexed like files (empty
//            unless the header's flags say the members carry them)
//
// Version 1 (a 160-byte header, six sections) is what an index without SHA-256 digests
// is still written as, so older daemons keep reading those; version 2 (a 176-byte header,
// seven sections) is written when the members carry digests, which `gpufsd pack` always
// records and `gpufsd index` adds to a pack or a mytar folder without rewriting its blobs.
//
// The header holds a magic, a version, the size of every section, flags (whether members
// carry checksums, and SHA-256 digests), the size and mtime of the source an index was made from
// (so a stale index of a mytar or tar source is noticed), an XXH3-64 of the body and one of itself.
// Opening checks both checksums and every reference between records before anything is
// served, so a damaged or truncated index is refused instead of crashing the daemon. The
// sections are exactly the catalog's in-memory arrays: serving from the mapping needs no
// copy and no per-file memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "dataset/catalog.h"
#include "dataset/error.h"
#include "dataset/format/file_io.h"

namespace gpufs {

inline constexpr std::string_view kNativeIndexName = "index.gpufs";
// The newest version this daemon reads and writes; it reads every version from 1.
inline constexpr uint32_t kNativeIndexVersion = 2;

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
