// The immutable tree a mount presents.
//
// Nodes are numbered breadth-first so that the children of every directory are one
// contiguous, name-sorted run of ids: a lookup is a binary search in that run, a readdir
// is a walk over it, and an inode number is simply id + 1. Names live in one string table.
//
// The record arrays have fixed, padding-free layouts so that the native index stores them
// verbatim: a Catalog either owns arrays it built from a DatasetSpec or views arrays in a
// mapped index file, and serves both the same way. After construction nothing changes, so
// every method is safe from any thread without locking.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/error.h"
#include "dataset/format/dataset_spec.h"

namespace gpufs {

using NodeId = uint32_t;

struct CatalogNode {
  uint32_t parent = 0;
  uint32_t name_offset = 0;  // into the name table
  uint16_t name_size = 0;
  uint16_t is_dir = 0;
  uint32_t first = 0;    // dir: id of the first child; file: index into the file table
  uint32_t count = 0;    // dir: number of children
  uint32_t subdirs = 0;  // dir: number of child directories (for st_nlink)
};
static_assert(sizeof(CatalogNode) == 24);

// Where a file's bytes lie.
struct FileExtent {
  uint32_t group = 0;
  uint32_t class_id = 0;
  uint64_t offset = 0;  // in the group's blob
  uint64_t size = 0;
  uint64_t checksum = 0;  // XXH3-64 of the bytes, when the catalog has checksums
};
static_assert(sizeof(FileExtent) == 32);

// A SHA-256 of a member's bytes: what bytes that crossed a trust boundary (a peer, a
// shared disk cache) are checked against. Unlike the XXH3-64 checksums, which catch
// damage, no one can make other bytes with the same digest.
using Sha256Digest = std::array<uint8_t, 32>;
static_assert(sizeof(Sha256Digest) == 32);

// The unit read together: a byte range of one blob.
struct GroupExtent {
  uint32_t blob = 0;
  uint32_t reserved = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};
static_assert(sizeof(GroupExtent) == 24);

// The arrays a catalog is made of, wherever they live.
struct CatalogTables {
  std::span<const CatalogNode> nodes;
  std::span<const FileExtent> files;
  std::span<const GroupExtent> groups;
  std::string_view names;
  std::vector<std::string> classes;
  std::vector<std::string> blobs;
  bool has_checksums = false;
  std::span<const Sha256Digest> sha256;  // indexed like files; empty when not recorded
};

class Catalog {
 public:
  static constexpr NodeId kRoot = 0;

  // Builds the tree: every class folder (even an empty one), then each member at its path.
  // Refuses a duplicate path or a path that is both a file and a folder, naming both lines.
  static Result<Catalog> FromSpec(const DatasetSpec& spec);
  // Serves `tables`, whose arrays `storage` keeps alive. The caller has validated them.
  Catalog(CatalogTables tables, std::shared_ptr<const void> storage);

  size_t node_count() const { return t_.nodes.size(); }
  size_t file_count() const { return t_.files.size(); }
  size_t dir_count() const { return t_.nodes.size() - t_.files.size(); }
  size_t group_count() const { return t_.groups.size(); }
  uint64_t total_bytes() const { return total_bytes_; }
  bool has_checksums() const { return t_.has_checksums; }
  bool has_sha256() const { return !t_.sha256.empty(); }

  bool Contains(NodeId id) const { return id < t_.nodes.size(); }
  bool IsDir(NodeId id) const { return t_.nodes[id].is_dir != 0; }
  NodeId Parent(NodeId id) const { return t_.nodes[id].parent; }
  std::string_view Name(NodeId id) const;
  // Children of a directory: ids [first, first + count), sorted by name.
  NodeId FirstChild(NodeId dir) const { return t_.nodes[dir].first; }
  uint32_t ChildCount(NodeId dir) const { return t_.nodes[dir].count; }
  uint32_t SubdirCount(NodeId dir) const { return t_.nodes[dir].subdirs; }
  // Index of a file node in the file table.
  uint32_t FileIndex(NodeId file) const { return t_.nodes[file].first; }
  const FileExtent& Extent(NodeId file) const { return t_.files[FileIndex(file)]; }
  const GroupExtent& Group(uint32_t group) const { return t_.groups[group]; }
  // The SHA-256 of file record `file_index`; null when the catalog has none.
  const Sha256Digest* Sha256(uint32_t file_index) const {
    return t_.sha256.empty() ? nullptr : &t_.sha256[file_index];
  }

  std::optional<NodeId> Find(NodeId dir, std::string_view name) const;
  // Resolves a '/'-separated path from the root; for tests and tools, not the hot path.
  std::optional<NodeId> FindPath(std::string_view path) const;
  // Path of a node relative to the root.
  std::string PathOf(NodeId id) const;

  const std::vector<std::string>& classes() const { return t_.classes; }
  const std::vector<std::string>& blobs() const { return t_.blobs; }
  const CatalogTables& tables() const { return t_; }

 private:
  CatalogTables t_;
  std::shared_ptr<const void> storage_;
  uint64_t total_bytes_ = 0;
};

}  // namespace gpufs
