// The immutable tree a mount presents, built once from a DatasetSpec.
//
// Nodes are numbered breadth-first so that the children of every directory are one
// contiguous, name-sorted run of ids: a lookup is a binary search in that run, a readdir
// is a walk over it, and an inode number is simply id + 1. Names live in one string arena.
// After Build() nothing changes, so every const method is safe from any thread without
// locking.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fs/error.h"
#include "fs/format/dataset_spec.h"

namespace gpufs {

using NodeId = uint32_t;

// Where a file's bytes lie.
struct FileExtent {
  uint32_t group = 0;
  uint32_t class_id = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

class Catalog {
 public:
  static constexpr NodeId kRoot = 0;

  // Builds the tree: one folder per class (even an empty one), then each member at its path.
  // Refuses a duplicate path or a path that is both a file and a folder, naming both lines.
  static Result<Catalog> FromSpec(const DatasetSpec& spec);

  size_t node_count() const { return nodes_.size(); }
  size_t file_count() const { return files_.size(); }
  size_t dir_count() const { return nodes_.size() - files_.size(); }
  uint64_t total_bytes() const { return total_bytes_; }

  bool Contains(NodeId id) const { return id < nodes_.size(); }
  bool IsDir(NodeId id) const { return nodes_[id].is_dir; }
  NodeId Parent(NodeId id) const { return nodes_[id].parent; }
  std::string_view Name(NodeId id) const;
  // Children of a directory: ids [first, first + count), sorted by name.
  NodeId FirstChild(NodeId dir) const { return nodes_[dir].first; }
  uint32_t ChildCount(NodeId dir) const { return nodes_[dir].count; }
  uint32_t SubdirCount(NodeId dir) const { return nodes_[dir].subdirs; }
  const FileExtent& Extent(NodeId file) const { return files_[nodes_[file].first]; }

  std::optional<NodeId> Find(NodeId dir, std::string_view name) const;
  // Resolves a '/'-separated path from the root; for tests and tools, not the hot path.
  std::optional<NodeId> FindPath(std::string_view path) const;
  // Path of a node relative to the root.
  std::string PathOf(NodeId id) const;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::vector<std::string>& blobs() const { return blobs_; }

 private:
  struct Node {
    NodeId parent = 0;
    uint32_t name_offset = 0;
    uint32_t name_size = 0;
    bool is_dir = false;
    uint32_t first = 0;    // dir: id of the first child; file: index into files_
    uint32_t count = 0;    // dir: number of children
    uint32_t subdirs = 0;  // dir: number of child directories (for st_nlink)
  };
  friend class CatalogBuilder;

  std::vector<Node> nodes_;
  std::vector<FileExtent> files_;
  std::string names_;
  std::vector<std::string> classes_;
  std::vector<std::string> blobs_;
  uint64_t total_bytes_ = 0;
};

}  // namespace gpufs
