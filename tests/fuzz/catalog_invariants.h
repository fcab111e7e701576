// What a mount relies on in a catalog, checked by every fuzz target after a parser has
// accepted its input. A parser that accepts an input is promising that the tree can be
// served: every node has a path, every listed name is found again by lookup (the binary
// search agrees with the listing), names are single path components, and every byte a
// read may ask for lies inside its group and its blob. A broken promise traps, so libFuzzer
// saves the input as a crash; the line on stderr says which promise and where.
//
// The checks read the raw tables and only call Catalog methods once the fields those
// methods index with are known to be in range, so the checker itself never reads out of
// bounds nor loops on a cycle.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/catalog.h"

namespace gpufs::fuzz {

[[noreturn]] inline void Broken(const char* what, uint64_t at) {
  std::fprintf(stderr, "catalog invariant broken: %s (at %llu)\n", what,
               static_cast<unsigned long long>(at));
  __builtin_trap();
}

inline void Require(bool ok, const char* what, uint64_t at = 0) {
  if (!ok) Broken(what, at);
}

// A name that lookup(2) and readdir(3) can carry: one path component of NAME_MAX bytes
// at most. Written out here rather than taken from dataset/format/name_rules.h, whose rules
// are among what is being checked.
inline bool IsPathComponent(std::string_view name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

namespace internal {

inline bool Within(std::string_view names, uint32_t offset, uint32_t size) {
  return offset <= names.size() && size <= names.size() - offset;
}

// Every name lies in the name table and, whole (a file's prefix and suffix), is one path
// component.
inline void CheckNames(const Catalog& catalog) {
  const CatalogTables& t = catalog.tables();
  for (NodeId id = 0; id < t.dirs.size(); ++id) {
    const CatalogDir& d = t.dirs[id];
    Require(Within(t.names, d.name_offset, d.name_size) &&
                Within(t.names, d.prefix_offset, d.prefix_size),
            "a name lies outside the name table", id);
    if (id != Catalog::kRoot) {
      Require(IsPathComponent(catalog.Name(id).str()), "a name is not a single path component", id);
    }
  }
  Require(t.file_names.size() == t.file_count() + 1, "the file names are not one per file");
  for (uint32_t i = 0; i < t.file_count(); ++i) {
    Require(t.file_names[i] <= t.file_names[i + 1] && t.file_names[i + 1] <= t.names.size(),
            "a file name lies outside the name table", i);
  }
}

// Folders' file runs follow one another and cover the file table: DirOf relies on it.
inline void CheckFileRuns(const Catalog& catalog) {
  const CatalogTables& t = catalog.tables();
  uint64_t next = 0;
  for (NodeId id = 0; id < t.dirs.size(); ++id) {
    Require(t.dirs[id].first_file == next, "a folder's files do not follow the last", id);
    next += t.dirs[id].file_count;
  }
  Require(next == t.file_count(), "the folders' files are not the file table");
}

// Every folder lists subfolders that name it as their parent and files whose folder it is,
// the merged listing sorted strictly by name so that Find, two binary searches, finds each
// of them; every node but the root is listed by its parent, and the root is its own (a
// listing of the root stats its '..').
inline void CheckFolders(const Catalog& catalog) {
  const CatalogTables& t = catalog.tables();
  const uint64_t n = t.dirs.size();
  Require(t.dirs[Catalog::kRoot].parent == Catalog::kRoot, "the root's parent is not the root",
          t.dirs[Catalog::kRoot].parent);
  for (NodeId id = 0; id < n; ++id) {
    const CatalogDir& d = t.dirs[id];
    // An empty run's first is never used, so it may hold anything.
    Require(d.dir_count == 0 || uint64_t{d.first_dir} + d.dir_count <= n,
            "a folder lists folders beyond the table", id);
    for (NodeId c = d.first_dir; c < d.first_dir + d.dir_count; ++c) {
      Require(c != Catalog::kRoot, "a folder lists the root", id);
      Require(t.dirs[c].parent == id, "a folder lists a folder whose parent is another", c);
    }
    for (uint32_t k = 0; k < catalog.ChildCount(id); ++k) {
      const NodeId c = catalog.ChildAt(id, k);
      Require(catalog.Contains(c), "a listed child is not in the catalog", c);
      Require(k == 0 || catalog.Name(catalog.ChildAt(id, k - 1)) < catalog.Name(c),
              "a folder's children are not sorted by name, or repeat a name", c);
      Require(catalog.Find(id, catalog.Name(c).str()) == c, "lookup does not find a listed child",
              c);
      Require(catalog.Parent(c) == id, "a listed child has another parent", c);
    }
  }
  for (NodeId id = 1; id < n; ++id) {
    const NodeId parent = t.dirs[id].parent;
    Require(parent < n, "a parent id lies beyond the folder table", id);
    Require(
        id >= t.dirs[parent].first_dir && id - t.dirs[parent].first_dir < t.dirs[parent].dir_count,
        "a folder is not among its parent's subfolders", id);
  }
}

// Following parents from any folder reaches the root: no cycles. Each folder is settled once.
inline void CheckReachesRoot(const Catalog& catalog) {
  const size_t n = catalog.dir_count();
  enum : uint8_t { kUnknown, kOnWalk, kReaches };
  std::vector<uint8_t> state(n, kUnknown);
  state[Catalog::kRoot] = kReaches;
  std::vector<NodeId> walk;
  for (NodeId id = 0; id < n; ++id) {
    walk.clear();
    NodeId at = id;
    while (state[at] == kUnknown) {
      state[at] = kOnWalk;
      walk.push_back(at);
      at = catalog.Parent(at);
    }
    Require(state[at] == kReaches, "following parents loops without reaching the root", id);
    for (NodeId w : walk) state[w] = kReaches;
  }
}

// Each file's bytes lie inside its group, and each group inside its blob.
inline void CheckExtents(const Catalog& catalog, std::span<const uint64_t> blob_sizes) {
  const CatalogTables& t = catalog.tables();
  Require(blob_sizes.empty() || blob_sizes.size() == t.blobs.size(),
          "the blob sizes do not match the blobs");
  for (uint32_t g = 0; g < t.groups.size(); ++g) {
    const GroupExtent& group = t.groups[g];
    Require(group.blob < t.blobs.size(), "a group names a missing blob", g);
    Require(group.size <= UINT64_MAX - group.offset, "a group's end overflows", g);
    Require(blob_sizes.empty() || group.offset + group.size <= blob_sizes[group.blob],
            "a group lies beyond the end of its blob", g);
  }
  Require(t.file_classes.empty() || t.file_classes.size() == t.file_count(),
          "the file classes are not one per file");
  Require(t.checksums.empty() || t.checksums.size() == t.file_count(),
          "the checksums are not one per file");
  for (uint32_t i = 0; i < t.file_count(); ++i) {
    const PackedExtent& e = t.extents[i];
    Require(e.group < t.groups.size(), "a file names a missing group", i);
    Require(e.size != kWideExtent || e.offset < t.wide.size(), "a file names a missing wide extent",
            i);
    const FileExtent f = catalog.ExtentAt(i);
    Require(catalog.ClassAt(i) < t.classes.size(), "a file names a missing class", i);
    const GroupExtent& g = t.groups[f.group];
    Require(f.offset >= g.offset && f.offset - g.offset <= g.size &&
                f.size <= g.size - (f.offset - g.offset),
            "a file lies outside its group", i);
    Require(catalog.SizeAt(i) == f.size, "a file's size differs from its extent's", i);
  }
}

}  // namespace internal

// Traps unless `catalog` can be served. `blob_sizes`, indexed like catalog.blobs(), are
// the sizes the blobs are known to have; empty when the format does not say (mytar text,
// whose blobs are measured later).
inline void CheckCatalog(const Catalog& catalog, std::span<const uint64_t> blob_sizes = {}) {
  const CatalogTables& t = catalog.tables();
  Require(!t.dirs.empty(), "the root is missing");
  internal::CheckNames(catalog);
  internal::CheckFileRuns(catalog);
  internal::CheckFolders(catalog);
  internal::CheckReachesRoot(catalog);
  for (NodeId id = 0; id < catalog.node_count(); ++id) {
    Require(catalog.FindPath(catalog.PathOf(id)) == id, "a node's path leads elsewhere", id);
  }
  internal::CheckExtents(catalog, blob_sizes);
}

}  // namespace gpufs::fuzz
