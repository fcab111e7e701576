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

inline void CheckNames(const Catalog& catalog) {
  const CatalogTables& t = catalog.tables();
  for (NodeId id = 0; id < t.nodes.size(); ++id) {
    const CatalogNode& node = t.nodes[id];
    Require(
        node.name_offset <= t.names.size() && node.name_size <= t.names.size() - node.name_offset,
        "a name lies outside the name table", id);
    if (id != Catalog::kRoot) {
      Require(IsPathComponent(catalog.Name(id)), "a name is not a single path component", id);
    }
  }
}

// Every folder lists a run of nodes that name it as their parent, sorted strictly by name
// so that Find, a binary search, finds each of them; every node but the root is listed by
// its parent.
inline void CheckFolders(const Catalog& catalog) {
  const CatalogTables& t = catalog.tables();
  const uint64_t n = t.nodes.size();
  for (NodeId id = 0; id < n; ++id) {
    const CatalogNode& node = t.nodes[id];
    if (!node.is_dir) continue;
    // An empty folder's `first` is never used, so it may hold anything.
    Require(node.count == 0 || uint64_t{node.first} + node.count <= n,
            "a folder lists nodes beyond the table", id);
    uint32_t subdirs = 0;
    for (NodeId c = node.first; c < node.first + node.count; ++c) {
      Require(c != Catalog::kRoot, "a folder lists the root", id);
      Require(t.nodes[c].parent == id, "a folder lists a node whose parent is another", c);
      Require(c == node.first || catalog.Name(c - 1) < catalog.Name(c),
              "a folder's children are not sorted by name, or repeat a name", c);
      Require(catalog.Find(id, catalog.Name(c)) == c, "lookup does not find a listed child", c);
      subdirs += t.nodes[c].is_dir ? 1 : 0;
    }
    Require(subdirs == node.subdirs, "a folder's subfolder count (st_nlink) is wrong", id);
  }
  for (NodeId id = 1; id < n; ++id) {
    const NodeId parent = t.nodes[id].parent;
    Require(parent < n, "a parent id lies beyond the node table", id);
    Require(t.nodes[parent].is_dir, "a parent is not a folder", id);
    Require(id >= t.nodes[parent].first && id - t.nodes[parent].first < t.nodes[parent].count,
            "a node is not among its parent's children", id);
  }
}

// Following parents from any node reaches the root: no cycles. Each node is settled once.
inline void CheckReachesRoot(const Catalog& catalog) {
  const size_t n = catalog.node_count();
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
  size_t file_nodes = 0;
  for (NodeId id = 0; id < t.nodes.size(); ++id) {
    if (t.nodes[id].is_dir) continue;
    ++file_nodes;
    Require(catalog.FileIndex(id) < t.files.size(), "a file names a missing file record", id);
    const FileExtent& f = catalog.Extent(id);
    Require(f.class_id < t.classes.size(), "a file names a missing class", id);
    Require(f.group < t.groups.size(), "a file names a missing group", id);
    const GroupExtent& g = t.groups[f.group];
    Require(f.offset >= g.offset && f.offset - g.offset <= g.size &&
                f.size <= g.size - (f.offset - g.offset),
            "a file lies outside its group", id);
  }
  Require(file_nodes == t.files.size(), "file_count() is not the number of file nodes");
}

}  // namespace internal

// Traps unless `catalog` can be served. `blob_sizes`, indexed like catalog.blobs(), are
// the sizes the blobs are known to have; empty when the format does not say (mytar text,
// whose blobs are measured later).
inline void CheckCatalog(const Catalog& catalog, std::span<const uint64_t> blob_sizes = {}) {
  const CatalogTables& t = catalog.tables();
  Require(!t.nodes.empty() && t.nodes[Catalog::kRoot].is_dir, "the root is not a folder");
  internal::CheckNames(catalog);
  internal::CheckFolders(catalog);
  internal::CheckReachesRoot(catalog);
  for (NodeId id = 0; id < t.nodes.size(); ++id) {
    Require(catalog.FindPath(catalog.PathOf(id)) == id, "a node's path leads elsewhere", id);
  }
  internal::CheckExtents(catalog, blob_sizes);
}

}  // namespace gpufs::fuzz
