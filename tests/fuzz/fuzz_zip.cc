// Fuzzes the zip listing, ListZip, then the decoding of what it lists: one recipe over every
// listed member, as a catalog's plan would hold for a run of them.
//
// A listing must name only bytes inside the archive, under normalized relative paths, in
// archive order and not overlapping, with a part per entry; decoding may refuse what it
// reads (a damaged deflate stream, a CRC-32 that does not match) but must not read or write
// outside the bytes it is given.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/compressed/zip.h"
#include "tests/fuzz/catalog_invariants.h"
#include "tests/fuzz/mem_file.h"

namespace gpufs::fuzz {
namespace {

bool IsNormalizedPath(std::string_view path) {
  for (size_t pos = 0;;) {
    const size_t slash = path.find('/', pos);
    if (!IsPathComponent(path.substr(pos, slash - pos))) return false;
    if (slash == std::string_view::npos) return true;
    pos = slash + 1;
  }
}

void CheckListing(const ZipListing& listing, uint64_t archive_size) {
  const std::vector<TarEntry>& entries = listing.files.entries;
  Require(listing.parts.size() == entries.size(), "the parts and the entries differ in number", 0);
  uint64_t covered = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const TarEntry& e = entries[i];
    const ZipPart& p = listing.parts[i];
    Require(p.data_offset == e.offset && p.size == e.size, "a part is not its entry's", i);
    Require(p.method == 0 || p.method == 8, "a part has a method that is not decoded", i);
    Require(p.data_offset <= archive_size && p.stored_size <= archive_size - p.data_offset,
            "a member's data lie outside the archive", i);
    Require(p.data_offset >= covered, "members' data overlap or are out of order", i);
    covered = p.data_offset + p.stored_size;
    Require(IsNormalizedPath(e.path), "an entry's path is not normalized", i);
  }
}

// One recipe over every part, decoded from the archive's bytes.
void DecodeAll(const ZipListing& listing, std::span<const char> archive) {
  DecodePlan plan;
  plan.kind = DecodeKind::kZip;
  plan.stored_size = archive.size();
  plan.parts = listing.parts;
  DecodeRecipe r;
  r.kind = DecodeKind::kZip;
  r.count = static_cast<uint32_t>(plan.parts.size());
  if (!plan.parts.empty()) {
    r.stored_offset = plan.parts.front().data_offset;
    r.stored_size = plan.parts.back().data_offset + plan.parts.back().stored_size - r.stored_offset;
  }
  for (const ZipPart& p : plan.parts) r.size += p.size;
  // A listed size is what the central directory claims, not what the input holds: a few
  // bytes may claim gigabytes, which is no finding.
  if (r.size > (64u << 20)) return;
  std::vector<char> out(r.size);
  (void)DecodeZipRecipe(plan, r, archive.subspan(r.stored_offset, r.stored_size), out,
                        "archive.zip", [](uint64_t) { return std::string("member"); });
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufs;
  static fuzz::MemFile file("archive.zip");
  file.Assign(data, size);
  auto reader = OpenFileReader(file.path());
  if (!reader) return 0;
  auto listing = ListZip(**reader);
  if (!listing) return 0;
  fuzz::CheckListing(*listing, size);
  fuzz::DecodeAll(*listing, {reinterpret_cast<const char*>(data), size});
  return 0;
}
