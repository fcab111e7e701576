// The immutable tree a mount presents, laid out so that 14 M files cost about 30 bytes
// each in what a walk, a lookup or a read touches.
//
// Folders are the only nodes. They are numbered breadth-first, so the subfolders of every
// folder are one contiguous, name-sorted run of folder ids. Files are not nodes: each
// folder owns one contiguous, name-sorted run of the file table, and the runs follow the
// folders' order. A file's id is the number of folders plus its index in the file table,
// so folders and files take disjoint id ranges, an inode number is still id + 1, and the
// folder of a file is found by a binary search over the folders' runs.
//
// A folder's children are its two runs merged by name: lookup is two binary searches,
// readdir a merge walk. File names share their folder's longest common prefix
// ("n01440764_"), stored once per folder; the file table keeps only each suffix, as
// offsets into the name table where the next file's offset ends this one's suffix.
//
// A file's extent is three u32s: its group, its offset within the group and its size;
// the rare file that does not fit (a member of 4 GiB, or 4 GiB into its group) keeps a
// wide record in a side table instead. Its class is its folder's unless the files of a
// folder differ, when a per-file class table is kept. XXH3 checksums and SHA-256 digests
// are side tables that a walk and a read from memory never touch.
//
// The record arrays have fixed, padding-free layouts so that the native index stores them
// verbatim: a Catalog either owns arrays it built or views arrays in a mapped index file,
// and serves both the same way. After construction nothing changes, so every method is
// safe from any thread without locking.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "dataset/dataset_spec.h"

namespace gpufs {

using NodeId = uint32_t;

struct CatalogDir {
  uint32_t parent = 0;       // the root is its own parent
  uint32_t name_offset = 0;  // into the name table
  uint32_t name_size = 0;
  uint32_t first_dir = 0;  // id of the first subfolder
  uint32_t dir_count = 0;
  uint32_t first_file = 0;  // index of the first file in the file table
  uint32_t file_count = 0;
  uint32_t prefix_offset = 0;  // the prefix every file name here starts with
  uint32_t prefix_size = 0;
  uint32_t class_id = 0;  // of the files here, unless the catalog has per-file classes
};
static_assert(sizeof(CatalogDir) == 40);

// Where a file's bytes lie, as stored. `offset` is relative to the group's start; a
// `size` of kWideExtent says that `offset` indexes the wide table instead.
struct PackedExtent {
  uint32_t group = 0;
  uint32_t offset = 0;
  uint32_t size = 0;
};
static_assert(sizeof(PackedExtent) == 12);
inline constexpr uint32_t kWideExtent = UINT32_MAX;

struct WideExtent {
  uint64_t offset = 0;  // within the group
  uint64_t size = 0;
};
static_assert(sizeof(WideExtent) == 16);

// Where a file's bytes lie, as consumers see it (assembled, not stored). Its class and
// checksum are asked for apart (ClassAt, ChecksumAt): they live in other pages.
struct FileExtent {
  uint32_t group = 0;
  uint64_t offset = 0;  // in the group's blob
  uint64_t size = 0;
};

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

// A node's name: a file's is its folder's prefix then its own suffix; a folder's is all
// in `rest`. Compares as the whole name would.
struct CatalogName {
  std::string_view prefix;
  std::string_view rest;

  size_t size() const { return prefix.size() + rest.size(); }
  std::string str() const { return std::string(prefix).append(rest); }
  operator std::string() const { return str(); }
  void AppendTo(std::string& out) const { out.append(prefix).append(rest); }
  // <0, 0 or >0 as the whole name compares with `other`, bytewise.
  int compare(std::string_view other) const;
  bool operator==(std::string_view other) const { return compare(other) == 0; }
  bool operator==(const CatalogName& other) const { return compare(other) == 0; }
  std::strong_ordering operator<=>(const CatalogName& other) const { return compare(other) <=> 0; }
  int compare(const CatalogName& other) const;
};

// The arrays a catalog is made of, wherever they live.
struct CatalogTables {
  std::span<const CatalogDir> dirs;
  std::span<const uint32_t> file_names;   // file_count + 1 offsets of suffixes in names
  std::span<const PackedExtent> extents;  // indexed like files
  std::span<const WideExtent> wide;
  std::span<const uint32_t> file_classes;  // indexed like files; empty when by folder
  std::span<const GroupExtent> groups;
  std::string_view names;
  std::vector<std::string> classes;
  std::vector<std::string> blobs;
  std::span<const uint64_t> checksums;   // indexed like files; empty when not recorded
  std::span<const Sha256Digest> sha256;  // indexed like files; empty when not recorded

  size_t file_count() const { return extents.size(); }
};

class Catalog {
 public:
  static constexpr NodeId kRoot = 0;

  // Serves `tables`, whose arrays `storage` keeps alive. The caller has validated them.
  Catalog(CatalogTables tables, std::shared_ptr<const void> storage);

  size_t node_count() const { return dir_count() + file_count(); }
  size_t file_count() const { return t_.extents.size(); }
  size_t dir_count() const { return t_.dirs.size(); }
  size_t group_count() const { return t_.groups.size(); }
  uint64_t total_bytes() const { return total_bytes_; }
  bool has_checksums() const { return !t_.checksums.empty(); }
  bool has_sha256() const { return !t_.sha256.empty(); }

  bool Contains(NodeId id) const { return id < node_count(); }
  bool IsDir(NodeId id) const { return id < t_.dirs.size(); }
  NodeId Parent(NodeId id) const { return IsDir(id) ? t_.dirs[id].parent : DirOf(FileIndex(id)); }
  CatalogName Name(NodeId id) const;
  // Children of a folder in name order: k in [0, ChildCount).
  uint32_t ChildCount(NodeId dir) const { return t_.dirs[dir].dir_count + t_.dirs[dir].file_count; }
  NodeId ChildAt(NodeId dir, uint32_t k) const;
  // Name(child) of a child of `dir`, without searching for a file's folder: for listings.
  CatalogName ChildName(NodeId dir, NodeId child) const {
    return IsDir(child) ? Name(child) : FileName(t_.dirs[dir], FileIndex(child));
  }
  uint32_t SubdirCount(NodeId dir) const { return t_.dirs[dir].dir_count; }
  // A file's index in the file tables, and back.
  uint32_t FileIndex(NodeId file) const { return file - static_cast<uint32_t>(t_.dirs.size()); }
  NodeId FileNode(uint32_t index) const { return static_cast<uint32_t>(t_.dirs.size()) + index; }
  // The folder holding file record `index`.
  NodeId DirOf(uint32_t index) const;
  FileExtent Extent(NodeId file) const { return ExtentAt(FileIndex(file)); }
  FileExtent ExtentAt(uint32_t index) const;
  uint64_t SizeAt(uint32_t index) const;
  uint32_t ClassAt(uint32_t index) const;
  // XXH3-64 of file record `index`'s bytes; 0 when the catalog has none.
  uint64_t ChecksumAt(uint32_t index) const {
    return t_.checksums.empty() ? 0 : t_.checksums[index];
  }
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
  CatalogName FileName(const CatalogDir& dir, uint32_t index) const;
  std::optional<NodeId> FindFile(const CatalogDir& dir, std::string_view name) const;

  CatalogTables t_;
  std::shared_ptr<const void> storage_;
  uint64_t total_bytes_ = 0;
};

}  // namespace gpufs
