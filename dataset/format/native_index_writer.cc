// Writes the native index (native_index.h): the catalog's tables as they are, the
// classes' and blobs' own records, then the header, in one buffer of the file's size.
#include <xxhash.h>

#include <array>
#include <cstring>
#include <string>
#include <utility>

#include "base/private_files.h"
#include "dataset/format/native_index.h"
#include "dataset/format/native_layout.h"

namespace gpufs {
namespace {

using namespace native_layout;

// The header with its checksum set, as bytes.
std::string HeaderBytes(Header h) {
  h.version = kNativeIndexVersion;
  h.header_size = sizeof(Header);
  h.header_checksum = HeaderChecksum(h);
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

// The sections of an index that are not the catalog's tables as they are. The names
// section is the catalog's names followed by `names`, the classes' and blobs' own.
struct IndexImage {
  size_t base = 0;  // the catalog's names, before these
  std::string names;
  std::vector<StrRef> classes;
  std::vector<BlobRecord> blobs;

  StrRef AddName(std::string_view name) {
    StrRef ref{static_cast<uint32_t>(base + names.size()), static_cast<uint32_t>(name.size())};
    names += name;
    return ref;
  }
};

// A read-only mapping of the whole index file, unmapped with the last Catalog using it.
using SectionParts = std::array<std::pair<const void*, uint64_t>, kSectionCount>;

// The index file: `h` (its sections, size and checksum filled in here), then each section
// of `parts`, the names in two pieces (the catalog's, then the index's own).
std::string IndexBytes(Header h, const SectionParts& parts, std::string_view names,
                       std::string_view more_names) {
  static_assert(sizeof(Header) % 8 == 0, "sections are aligned from the file's start");
  // One buffer of the file's exact size, the header written last: at 14 M files the
  // index is 366 MB, and a copy of it (or a doubling) would be the mount's peak.
  uint64_t end = sizeof(Header);
  for (int i = 0; i < kSectionCount; ++i) {
    end = Align8(end);
    h.sections[i] = Section{end, parts[i].second};
    end += parts[i].second * kRecordSize[i];
  }
  std::string bytes;
  bytes.reserve(end);
  bytes.resize(sizeof(Header));
  for (int i = 0; i < kSectionCount; ++i) {
    bytes.resize(Align8(bytes.size()), '\0');
    if (i == 0) {
      bytes += names;
      bytes += more_names;
    } else {
      bytes.append(static_cast<const char*>(parts[i].first), parts[i].second * kRecordSize[i]);
    }
  }
  h.file_size = bytes.size();
  h.body_checksum = XXH3_64bits(bytes.data() + sizeof(Header), bytes.size() - sizeof(Header));
  const std::string header = HeaderBytes(h);
  bytes.replace(0, header.size(), header);
  return bytes;
}

}  // namespace

Status WriteNativeIndex(const Catalog& catalog, const IndexInfo& info,
                        const std::filesystem::path& path, FileAccess access) {
  const CatalogTables& t = catalog.tables();
  if (info.blobs.size() != t.blobs.size()) {
    return Fail(EINVAL, "cannot write index {}: {} blob records for {} blobs", path.string(),
                info.blobs.size(), t.blobs.size());
  }
  IndexImage image;
  image.base = t.names.size();
  for (const std::string& c : t.classes) image.classes.push_back(image.AddName(c));
  for (size_t i = 0; i < t.blobs.size(); ++i) {
    image.blobs.push_back(
        BlobRecord{image.AddName(t.blobs[i]), info.blobs[i].size, info.blobs[i].checksum});
  }
  const SectionParts parts = {{
      {t.names.data(), t.names.size() + image.names.size()},  // in two pieces, below
      {image.classes.data(), image.classes.size()},
      {image.blobs.data(), image.blobs.size()},
      {t.groups.data(), t.groups.size()},
      {t.dirs.data(), t.dirs.size()},
      {t.file_names.data(), t.file_names.size()},
      {t.extents.data(), t.extents.size()},
      {t.wide.data(), t.wide.size()},
      {t.file_classes.data(), t.file_classes.size()},
      {t.checksums.data(), t.checksums.size()},
      {t.sha256.data(), t.sha256.size()},
  }};
  if (!t.sha256.empty() && t.sha256.size() != t.file_count()) {
    return Fail(EINVAL, "cannot write index {}: {} SHA-256 digests for {} files", path.string(),
                t.sha256.size(), t.file_count());
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.flags = (t.checksums.empty() ? 0 : kHasChecksums) | (t.sha256.empty() ? 0 : kHasSha256) |
            (info.tar_listed_as_extracted ? kTarListedAsExtracted : 0) |
            (info.decoded ? kDecodePlans : 0);
  h.alignment = info.alignment;
  h.source_size = info.source.size;
  h.source_mtime_ns = info.source.mtime_ns;
  const std::string bytes = IndexBytes(h, parts, t.names, image.names);
  return WriteFileAtomically(path, bytes, access);
}

}  // namespace gpufs
