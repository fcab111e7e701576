// Fuzzes the tar walker, ListTar, then the tree the daemon builds from its listing:
// ShapeTree and the catalog TarCatalog builds, grouped as a mount groups them.
//
// A listing must name only bytes inside the archive, under normalized relative paths
// (ShapeTree relies on that); the catalog built from it must be servable
// (catalog_invariants.h). A walk that never ends is a finding too: libFuzzer's -timeout
// reports it.
//
// Each header's checksum is made right before the walk (SealHeaders), for the reason the
// native index target recomputes its checksums: a mutated header would almost always be
// refused at its checksum, and a checksum anyone can compute is no defence.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/catalog.h"
#include "dataset/format/tar.h"
#include "dataset/format/tree_shape.h"
#include "dataset/open/open_dataset.h"
#include "tests/fuzz/catalog_invariants.h"
#include "tests/fuzz/mem_file.h"

namespace gpufs::fuzz {
namespace {

// Small, so that the few files of a fuzzed archive still make several groups.
constexpr uint64_t kGroupBytes = 4096;
constexpr uint64_t kBlock = 512;

// A header's size field as the walker reads it: octal text, or GNU base-256 when the top
// bit of the first byte is set; nullopt when base-256 does not fit 64 bits.
std::optional<uint64_t> HeaderSize(const uint8_t* block) {
  const uint8_t* field = block + 124;
  uint64_t v = 0;
  if (field[0] & 0x80) {
    v = field[0] & 0x7f;
    for (size_t i = 1; i < 12; ++i) {
      if (v >> 56) return std::nullopt;
      v = (v << 8) | field[i];
    }
    return v;
  }
  size_t i = 0;
  while (i < 12 && (field[i] == ' ' || field[i] == '\0')) ++i;
  for (; i < 12 && field[i] >= '0' && field[i] <= '7'; ++i) v = v * 8 + (field[i] - '0');
  return v;
}

// The size a pax record "<n> size=<v>\n" sets for the next entry, if any.
std::optional<uint64_t> PaxSize(std::string_view records) {
  const size_t at = records.find(" size=");
  if (at == std::string_view::npos) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = at + 6; i < records.size() && records[i] >= '0' && records[i] <= '9'; ++i) {
    v = v * 10 + static_cast<uint64_t>(records[i] - '0');
  }
  return v;
}

// Writes the right checksum into every header of the archive in [begin, end), found as the
// walker finds them, and into those of inner archives ("*.tar" entries). Stops where the
// walker would, or where a size would wrap: what the walker does there is for it to get
// right.
void SealHeaders(std::vector<uint8_t>& bytes, uint64_t begin, uint64_t end, int depth) {
  std::optional<uint64_t> pax_size;
  for (uint64_t pos = begin; pos + kBlock <= end;) {
    uint8_t* block = bytes.data() + pos;
    if (std::all_of(block, block + kBlock, [](uint8_t b) { return b == 0; })) return;
    uint64_t sum = 0;
    for (size_t i = 0; i < kBlock; ++i) sum += (i >= 148 && i < 156) ? ' ' : block[i];
    char field[9];
    std::snprintf(field, sizeof(field), "%06o", static_cast<unsigned>(sum & 0777777));
    std::memcpy(block + 148, field, 7);  // six digits and a NUL
    block[155] = ' ';
    // A pax size is the next member's: the extended headers before it keep their own.
    // Links, devices, fifos and folders carry no data.
    const char type = static_cast<char>(block[156]);
    const bool extended = type == 'L' || type == 'K' || type == 'x' || type == 'X' || type == 'g';
    std::optional<uint64_t> size = HeaderSize(block);
    if (size && !extended) {
      if (pax_size) size = pax_size;
      if (type >= '1' && type <= '6') size = 0;
    }
    if (!extended) pax_size.reset();
    const uint64_t data = pos + kBlock;
    if (!size || *size > end - data) return;
    const std::string_view name(reinterpret_cast<const char*>(block),
                                strnlen(reinterpret_cast<const char*>(block), 100));
    if (type == 'x' || type == 'X') {
      const auto records = PaxSize({reinterpret_cast<const char*>(bytes.data() + data), *size});
      if (records) pax_size = records;
    } else if (depth == 0 && name.ends_with(".tar")) {
      SealHeaders(bytes, data, data + *size, depth + 1);
    }
    pos = data + (*size + kBlock - 1) / kBlock * kBlock;
  }
}

bool IsNormalizedPath(std::string_view path) {
  for (size_t pos = 0;;) {
    const size_t slash = path.find('/', pos);
    if (!IsPathComponent(path.substr(pos, slash - pos))) return false;
    if (slash == std::string_view::npos) return true;
    pos = slash + 1;
  }
}

void CheckListing(const TarListing& listing, uint64_t archive_size) {
  for (size_t i = 0; i < listing.entries.size(); ++i) {
    const TarEntry& e = listing.entries[i];
    Require(e.offset <= archive_size && e.size <= archive_size - e.offset,
            "an entry's bytes lie outside the archive", i);
    Require(IsNormalizedPath(e.path), "an entry's path is not normalized", i);
  }
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufs;
  static fuzz::MemFile file("archive.tar");
  std::vector<uint8_t> bytes(data, data + size);
  fuzz::SealHeaders(bytes, 0, bytes.size(), 0);
  file.Assign(bytes.data(), bytes.size());
  auto listing = ListTar(file.path());
  if (!listing) return 0;
  fuzz::CheckListing(*listing, size);
  std::vector<std::string_view> paths;
  for (const TarEntry& e : listing->entries) paths.push_back(e.path);
  auto shape = ShapeTreeOfViews(paths, SplitMode::kAuto, true, "archive.tar");
  if (!shape) return 0;
  fuzz::Require(shape->file_classes.size() == paths.size(), "ShapeTree misses a path", 0);
  for (size_t i = 0; i < paths.size(); ++i) {
    const uint32_t c = shape->file_classes[i];
    fuzz::Require(c == kOutsideClasses || c < shape->classes.size(),
                  "ShapeTree names a missing class", i);
  }
  auto catalog = TarCatalog("archive.tar", *listing, *shape, fuzz::kGroupBytes);
  if (!catalog) return 0;
  // Every group lies in the one blob, the archive.
  const std::vector<uint64_t> blob_sizes(catalog->blobs().size(), size);
  fuzz::CheckCatalog(*catalog, blob_sizes);
  return 0;
}
