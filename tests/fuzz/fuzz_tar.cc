// Fuzzes the tar walker, ListTar, then the tree the daemon builds from its listing:
// ShapeTree and Catalog::FromSpec, grouped as fs/format/open_dataset.cc's TarSpec groups.
//
// A listing must name only bytes inside the archive, under normalized relative paths
// (ShapeTree relies on that); the catalog built from it must be servable
// (catalog_invariants.h). A walk that never ends is a finding too: libFuzzer's -timeout
// reports it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fs/catalog.h"
#include "fs/format/tar.h"
#include "fs/format/tree_shape.h"
#include "tests/fuzz/catalog_invariants.h"
#include "tests/fuzz/mem_file.h"

namespace gpufs::fuzz {
namespace {

// Small, so that the few files of a fuzzed archive still make several groups.
constexpr uint64_t kGroupBytes = 4096;

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

// A copy of TarSpec in fs/format/open_dataset.cc: groups are runs of members that lie
// next to each other in the archive.
DatasetSpec TarSpec(const TarListing& listing, TreeShape& shape) {
  DatasetSpec spec;
  spec.index_file = "archive.tar";
  spec.classes = shape.classes;
  spec.folders = shape.folders;
  std::vector<ShapedFile*> files;
  for (ShapedFile& f : shape.files) files.push_back(&f);
  std::stable_sort(files.begin(), files.end(), [&](const ShapedFile* a, const ShapedFile* b) {
    return listing.entries[a->input].offset < listing.entries[b->input].offset;
  });
  for (const ShapedFile* f : files) {
    const TarEntry& e = listing.entries[f->input];
    if (spec.groups.empty() || e.offset + e.size - spec.groups.back().offset > kGroupBytes) {
      spec.groups.push_back(GroupSpec{"archive.tar", e.offset, 0, 0});
    }
    GroupSpec& g = spec.groups.back();
    g.size = std::max(g.size, e.offset + e.size - g.offset);
    spec.members.push_back(MemberSpec{std::move(f->tree_path), f->class_id,
                                      static_cast<uint32_t>(spec.groups.size() - 1), e.offset,
                                      e.size, 0, static_cast<uint32_t>(f->input + 1)});
  }
  return spec;
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufs;
  static fuzz::MemFile file("archive.tar");
  file.Assign(data, size);
  auto listing = ListTar(file.path());
  if (!listing) return 0;
  fuzz::CheckListing(*listing, size);
  std::vector<std::string> paths;
  for (const TarEntry& e : listing->entries) paths.push_back(e.path);
  auto shape = ShapeTree(paths, SplitMode::kAuto, true, "archive.tar");
  if (!shape) return 0;
  for (const ShapedFile& f : shape->files) {
    fuzz::Require(f.input < paths.size() && f.class_id < shape->classes.size(),
                  "ShapeTree names a missing path or class", f.input);
  }
  auto catalog = Catalog::FromSpec(fuzz::TarSpec(*listing, *shape));
  if (!catalog) return 0;
  // Every group lies in the one blob, the archive.
  const std::vector<uint64_t> blob_sizes(catalog->blobs().size(), size);
  fuzz::CheckCatalog(*catalog, blob_sizes);
  return 0;
}
