#include "dataset/open/tar_dataset.h"

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "dataset/catalog_builder.h"
#include "dataset/printable.h"

namespace gpufs {

Result<Dataset> TarDataset(const std::filesystem::path& archive, TarListing& listing,
                           const SourceStamp& stamp, uint64_t group_bytes,
                           const std::vector<uint64_t>* cuts) {
  std::vector<std::string_view> paths;
  paths.reserve(listing.entries.size());
  for (const TarEntry& e : listing.entries) paths.push_back(e.path);
  auto shape = ShapeTreeOfViews(paths, SplitMode::kAuto, true, archive.string());
  if (!shape) return shape.error();
  std::vector<std::string_view>().swap(paths);
  auto catalog = TarCatalog(archive, listing, *shape, group_bytes, cuts);
  if (!catalog) return catalog.error();
  Dataset d{
      archive.parent_path(), std::move(*catalog), {BlobInfo{stamp.size, 0}}, "tar", {}, {}, {}, {}};
  if (listing.skipped) {
    d.notes.push_back(
        fmt::format("{} symbolic links, devices or fifos (or hard links to them) in the archive "
                    "have no bytes to serve and are not shown",
                    listing.skipped));
  }
  if (listing.replaced) {
    d.notes.push_back(
        fmt::format("{} members of the archive are replaced by a later member of the same path "
                    "and are not shown: extracting the archive keeps the last",
                    listing.replaced));
  }
  if (!shape->stripped.empty()) {
    d.notes.push_back(
        fmt::format("all files of the archive lie in the folder {}, which is looked "
                    "through: what it holds is shown at the top",
                    Printable(shape->stripped)));
  }
  if (!shape->outside.empty()) {
    d.notes.push_back(fmt::format("{} files outside class folders are not shown (first: {})",
                                  shape->outside.size(), shape->outside.front()));
  }
  return d;
}

namespace {

// Hands the whole pages of [begin, end) back to the kernel: memory still allocated but
// never read again, which reads as zeros if it is. The pages stay inside the range, clear
// of the allocator's own words around it.
void ReleasePages(const void* begin, const void* end) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t from = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t to = reinterpret_cast<uintptr_t>(end) / page * page;
  if (from < to) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

constexpr size_t kReleaseEvery = 1u << 20;  // files fed

// Whether member `e` starts a group: where it would not fit the group begun at
// `group_start`; with `cuts`, only where it is the first at or past the next cut.
bool NewGroupAt(const TarEntry& e, bool first, uint64_t group_start, uint64_t group_bytes,
                const std::vector<uint64_t>* cuts, size_t& next_cut) {
  if (!cuts) return first || e.offset + e.size - group_start > group_bytes;
  bool cut = false;
  while (next_cut < cuts->size() && (*cuts)[next_cut] <= e.offset) {
    ++next_cut;
    cut = true;
  }
  return first || cut;
}

}  // namespace

Result<Catalog> TarCatalog(const std::filesystem::path& archive, TarListing& listing,
                           TreeShape& shape, uint64_t group_bytes,
                           const std::vector<uint64_t>* cuts) {
  CatalogBuilder builder(archive.string(), false, false);
  builder.SetClasses(std::move(shape.classes));
  // Every class folder holds a file, which makes it: adding the folders apart would put
  // them before the files and the paths out of the archive's order, which the builder
  // sorts much faster when it is already the paths' order.
  const std::vector<TarEntry>& entries = listing.entries;
  std::vector<uint32_t> by_offset;
  by_offset.reserve(entries.size());
  for (uint32_t i = 0; i < entries.size(); ++i) {
    if (shape.file_classes[i] != kOutsideClasses) by_offset.push_back(i);
  }
  // Already in order but for hard links, which point back.
  const bool in_order =
      std::is_sorted(by_offset.begin(), by_offset.end(),
                     [&](uint32_t a, uint32_t b) { return entries[a].offset < entries[b].offset; });
  if (!in_order) {
    std::stable_sort(by_offset.begin(), by_offset.end(),
                     [&](uint32_t a, uint32_t b) { return entries[a].offset < entries[b].offset; });
  }
  // The builder reads the paths where the listing keeps them, and frees them.
  builder.AdoptPaths(std::move(listing.paths));
  builder.Reserve(by_offset.size(), 0);
  const std::string blob = archive.filename().string();
  uint64_t group_start = 0;
  size_t next_cut = 0;    // of *cuts
  size_t released = 0;    // entries handed back, when they are fed in order
  size_t released_n = 0;  // of by_offset
  for (size_t n = 0; n < by_offset.size(); ++n) {
    const uint32_t i = by_offset[n];
    const TarEntry& e = entries[i];
    // The entries fed go as the builder's tables grow, so that both are not held whole at
    // once (32 and 36 bytes a file).
    if (in_order && i - released >= kReleaseEvery) {
      ReleasePages(entries.data() + released, entries.data() + i);
      ReleasePages(shape.file_classes.data() + released, shape.file_classes.data() + i);
      ReleasePages(by_offset.data() + released_n, by_offset.data() + n);
      released = i;
      released_n = n;
    }
    if (NewGroupAt(e, builder.group_count() == 0, group_start, group_bytes, cuts, next_cut)) {
      group_start = e.offset;
      builder.AddGroup(blob, e.offset, 0);
    }
    const MemberRecord member{
        shape.file_classes[i], builder.group_count() - 1, e.offset, e.size, 0, i + 1};
    const std::string_view tree_path = e.path.substr(shape.stripped.size());
    if (Status s = builder.AddFile(tree_path, member, nullptr); !s) return s.error();
  }
  // What the builder no longer needs goes before it builds.
  std::vector<uint32_t>().swap(by_offset);
  std::vector<uint32_t>().swap(shape.file_classes);
  std::vector<TarEntry>().swap(listing.entries);
  malloc_trim(0);
  return std::move(builder).Build();
}

}  // namespace gpufs
