// The native index's layout on disk (docs/native_index.md), shared by its reader
// (native_index.cc) and its writer (native_index_writer.cc): the header, its sections and
// the records that are not the catalog's own.
#pragma once

#include <xxhash.h>

#include <array>
#include <bit>
#include <cstdint>
#include <string>

#include "dataset/catalog.h"

namespace gpufs::native_layout {

static_assert(std::endian::native == std::endian::little, "the index is little-endian");

inline constexpr char kMagic[8] = {'G', 'P', 'U', 'F', 'S', 'I', 'D', 'X'};
inline constexpr uint32_t kHasChecksums = 1;
inline constexpr uint32_t kHasSha256 = 2;
// A tar's listing made as GNU tar extracts the archive (long link targets, v7 folders, the
// last member of a path): an older listing of an unchanged archive may differ, so it is
// made again.
inline constexpr uint32_t kTarListedAsExtracted = 4;
// A compressed archive's index: its groups lie in decoded space, made by the decode plans
// of the file beside it (`<index>.plan`), and each blob's size is that of its decoded
// space.
inline constexpr uint32_t kDecodePlans = 8;

struct Section {
  uint64_t offset = 0;
  uint64_t count = 0;
};

enum SectionId {
  kNames,
  kClasses,
  kBlobs,
  kGroups,
  kDirs,
  kFileNames,
  kExtents,
  kWide,
  kFileClasses,
  kChecksums,
  kSha256,
  kSectionCount
};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint64_t file_size;
  uint64_t body_checksum;
  uint32_t flags;
  uint32_t alignment;
  uint64_t source_size;
  int64_t source_mtime_ns;
  Section sections[kSectionCount];
  uint64_t header_checksum;  // XXH3-64 of the header with this field zero
};
static_assert(sizeof(Header) == 240);

struct StrRef {
  uint32_t offset;
  uint32_t size;
};

struct BlobRecord {
  StrRef name;
  uint64_t size;
  uint64_t checksum;
};
static_assert(sizeof(BlobRecord) == 24);

inline constexpr std::array<size_t, kSectionCount> kRecordSize = {1,
                                                                  sizeof(StrRef),
                                                                  sizeof(BlobRecord),
                                                                  sizeof(GroupExtent),
                                                                  sizeof(CatalogDir),
                                                                  sizeof(uint32_t),
                                                                  sizeof(PackedExtent),
                                                                  sizeof(WideExtent),
                                                                  sizeof(uint32_t),
                                                                  sizeof(uint64_t),
                                                                  sizeof(Sha256Digest)};

inline uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

template <typename H>
uint64_t HeaderChecksum(H header) {
  header.header_checksum = 0;
  return XXH3_64bits(&header, sizeof(header));
}

}  // namespace gpufs::native_layout
