// Builds a Catalog from paths streamed in any order, holding about 66 bytes per file with
// ImageNet's names once fed (about 100 at its peak in Build): paths go to an append-only
// arena (or are borrowed from the caller's), each path gets a 16-byte item and each file
// its line and packed extent (and checksum) as it arrives; Build sorts the items, not the
// paths, and writes the compact tables of catalog.h, freeing what it no longer needs as
// it goes.
// A format reader feeds it member by member, with no per-member string or spec record.
//
// Not thread-safe; one builder makes one catalog.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "dataset/catalog.h"
#include "dataset/path_arena.h"

namespace gpufs {

struct MemberRecord {
  uint32_t class_id = 0;
  uint32_t group = 0;
  uint64_t offset = 0;  // of the member in its blob
  uint64_t size = 0;
  uint64_t checksum = 0;  // XXH3-64 of the member's bytes, when the builder keeps them
  uint32_t line = 0;      // where the member came from, for messages
};

class CatalogBuilder {
 public:
  // `source` names the index or archive in messages; `checksums` and `sha256` say whether
  // the members carry them.
  CatalogBuilder(std::string source, bool checksums, bool sha256);
  ~CatalogBuilder();

  // The paths given from here on lie in `paths` and are not copied: a tar listing's are
  // already in an arena, and a copy of each would be the largest thing held while the
  // builder is fed. Build frees them once it has written the names.
  void AdoptPaths(PathArena paths) {
    paths_ = std::move(paths);
    adopted_ = true;
  }
  void SetClasses(std::vector<std::string> classes) { classes_ = std::move(classes); }
  // Room for `files` files (and folders) whose paths take `path_bytes` in all, when the
  // caller knows: the tables then grow by no doubling, which at 14 M files would hold
  // half as much again as they need.
  void Reserve(size_t files, size_t path_bytes);
  // Groups are numbered in the order they are added; blobs by their first group.
  uint32_t AddGroup(std::string_view blob, uint64_t offset, uint64_t size);
  // Widens group `group` to end at `end` in its blob, when it ends before.
  void WidenGroup(uint32_t group, uint64_t end);
  uint32_t group_count() const { return static_cast<uint32_t>(groups_.size()); }
  // A folder that exists even when empty (a class folder).
  Status AddFolder(std::string_view path);
  // A file at `path`; its group must have been added. `sha256` when the builder keeps them.
  Status AddFile(std::string_view path, const MemberRecord& member, const Sha256Digest* sha256);
  // Refuses a duplicate path or a path that is both a file and a folder, naming both lines.
  Result<Catalog> Build() &&;

 private:
  struct Item;
  struct TempDir;
  struct Tree;
  struct OwnedTables;
  Status AddPath(std::string_view path, uint32_t line, uint32_t file);
  uint32_t LineOf(const Item& item) const;
  template <typename Before>
  void SortItems(const Before& before);
  Status Walk(Tree& tree);
  Status PlaceFile(Tree& tree, uint32_t parent, std::string_view path, std::string_view name,
                   uint32_t line, uint32_t file);
  Result<uint32_t> PlaceFolder(Tree& tree, uint32_t parent, std::string_view name, uint32_t line);
  Status WriteNames(const Tree& tree, const std::vector<uint32_t>& bfs,
                    const std::vector<uint32_t>& order, OwnedTables& out) const;
  Status WriteFiles(const Tree& tree, const std::vector<uint32_t>& order, OwnedTables& out);
  Catalog Finish(std::shared_ptr<OwnedTables> out);

  std::string source_;
  bool checksums_ = false;
  bool sha256_ = false;
  std::vector<std::string> classes_;
  std::vector<std::string> blobs_;
  std::unordered_map<std::string, uint32_t> blob_ids_;
  std::vector<GroupExtent> groups_;
  PathArena paths_;
  bool adopted_ = false;         // paths_ came whole from the caller
  std::vector<uint32_t> lines_;  // per file, in arrival order
  std::vector<Item> items_;
  // Per file, in arrival order.
  std::vector<PackedExtent> extents_;
  std::vector<WideExtent> wide_;
  std::vector<uint32_t> classes_of_;
  std::vector<uint64_t> checksums_of_;
  std::vector<Sha256Digest> sha256_of_;
};

// Builds the tree: every class folder (even an empty one), then each member at its path.
// Refuses a duplicate path or a path that is both a file and a folder, naming both lines.
Result<Catalog> CatalogFromSpec(const DatasetSpec& spec);

}  // namespace gpufs
