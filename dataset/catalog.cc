#include "dataset/catalog.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>
#include <memory>
#include <unordered_map>

namespace gpufs {

namespace {

// Orders paths component by component: '/' sorts below every other byte, so "a/b" comes
// before "a-c" exactly as child "a" comes before sibling "a-c". Sorting whole paths this
// way yields each folder's children already in name order and puts a name's subtree
// right after it, which is what lets the builder below work without any lookup table.
// Returns <0, 0 or >0. Paths share long prefixes ("n01440764/n01440764_"), so the first
// difference is found eight bytes at a time.
int ComparePaths(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    uint64_t y;
    std::memcpy(&x, a.data() + i, 8);
    std::memcpy(&y, b.data() + i, 8);
    if (x != y) {
      i += static_cast<size_t>(std::countr_zero(x ^ y)) / 8;  // little-endian: first byte
      break;
    }
  }
  for (; i < n; ++i) {
    if (a[i] == b[i]) continue;
    const auto rank = [](char c) { return c == '/' ? 0 : static_cast<unsigned char>(c) + 1; };
    return rank(a[i]) - rank(b[i]);
  }
  return a.size() < b.size() ? -1 : (a.size() > b.size() ? 1 : 0);
}

struct PathItem {
  std::string_view path;
  const MemberSpec* member;  // null for a class folder
};

}  // namespace

// Builds the tree from paths visited in ComparePaths order, then flattens it breadth-first.
// Siblings arrive sorted, so a new node only ever needs comparing with the last child of
// its parent: that is where duplicates and file/folder clashes show.
class CatalogBuilder {
 public:
  CatalogBuilder() { nodes_.push_back(TempNode{"", 0, true, 0, nullptr, {}}); }

  Status Add(const PathItem& item) {
    const uint32_t line = item.member ? item.member->line : 0;
    size_t depth = 0;
    size_t pos = 0;
    for (;;) {
      const size_t slash = item.path.find('/', pos);
      const std::string_view name = item.path.substr(pos, slash - pos);
      const bool last = slash == std::string_view::npos;
      if (last && item.member) return AddFile(depth, name, *item.member);
      if (depth >= stack_.size() || nodes_[stack_[depth]].name != name) {
        stack_.resize(depth);
        auto dir = AddDir(Parent(depth), name, line);
        if (!dir) return dir.error();
        stack_.push_back(*dir);
      }
      if (last) return Ok{};
      ++depth;
      pos = slash + 1;
    }
  }

  Catalog Build(const DatasetSpec& spec) && {
    auto owned = std::make_shared<OwnedTables>();
    Flatten(*owned, spec.has_sha256);
    AddGroups(spec, *owned);
    CatalogTables tables;
    tables.nodes = owned->nodes;
    tables.files = owned->files;
    tables.groups = owned->groups;
    tables.names = owned->names;
    tables.classes = spec.classes;
    tables.blobs = std::move(owned->blobs);
    tables.has_checksums = spec.has_checksums;
    if (spec.has_sha256) tables.sha256 = owned->sha256;
    return Catalog(std::move(tables), std::move(owned));
  }

 private:
  struct OwnedTables {
    std::vector<CatalogNode> nodes;
    std::vector<FileExtent> files;
    std::vector<Sha256Digest> sha256;  // beside files, when the spec has them
    std::vector<GroupExtent> groups;
    std::string names;
    std::vector<std::string> blobs;
  };

  // Numbers the nodes breadth-first, so that each folder's children are contiguous.
  void Flatten(OwnedTables& out, bool sha256) const {
    // Reserved up front: `flat` below refers into out.nodes while children are appended.
    out.nodes.reserve(nodes_.size());
    out.nodes.push_back(CatalogNode{});
    std::vector<uint32_t> new_id(nodes_.size());
    std::deque<uint32_t> queue{0};
    while (!queue.empty()) {
      const uint32_t old = queue.front();
      queue.pop_front();
      const TempNode& node = nodes_[old];
      CatalogNode& flat = out.nodes[new_id[old]];
      flat.name_offset = static_cast<uint32_t>(out.names.size());
      flat.name_size = static_cast<uint16_t>(node.name.size());
      out.names += node.name;
      flat.is_dir = node.is_dir ? 1 : 0;
      if (!node.is_dir) {
        const MemberSpec& m = *node.member;
        flat.first = static_cast<uint32_t>(out.files.size());
        out.files.push_back(FileExtent{m.group, m.class_id, m.offset, m.size, m.checksum});
        if (sha256) out.sha256.push_back(m.sha256);
        continue;
      }
      flat.first = static_cast<uint32_t>(out.nodes.size());
      flat.count = static_cast<uint32_t>(node.children.size());
      const NodeId parent = new_id[old];
      for (uint32_t child : node.children) {
        new_id[child] = static_cast<uint32_t>(out.nodes.size());
        out.nodes.push_back(CatalogNode{.parent = parent});
        if (nodes_[child].is_dir) ++out.nodes[parent].subdirs;
        queue.push_back(child);
      }
    }
  }

  // Blob names are shared by the groups that lie in the same file (a tar archive).
  static void AddGroups(const DatasetSpec& spec, OwnedTables& out) {
    std::unordered_map<std::string_view, uint32_t> blob_ids;
    for (const GroupSpec& g : spec.groups) {
      auto [it, added] = blob_ids.emplace(g.blob, static_cast<uint32_t>(out.blobs.size()));
      if (added) out.blobs.push_back(g.blob);
      out.groups.push_back(GroupExtent{it->second, 0, g.offset, g.size});
    }
  }

  struct TempNode {
    std::string_view name;  // into the DatasetSpec, which outlives the builder
    uint32_t parent = 0;
    bool is_dir = false;
    uint32_t line = 0;
    const MemberSpec* member = nullptr;
    std::vector<uint32_t> children;  // in name order
  };

  uint32_t Parent(size_t depth) const { return depth == 0 ? 0 : stack_[depth - 1]; }

  // The last child of `parent` if it is called `name`.
  const TempNode* Clash(uint32_t parent, std::string_view name) const {
    const auto& siblings = nodes_[parent].children;
    if (siblings.empty() || nodes_[siblings.back()].name != name) return nullptr;
    return &nodes_[siblings.back()];
  }

  Result<uint32_t> AddDir(uint32_t parent, std::string_view name, uint32_t line) {
    if (const TempNode* other = Clash(parent, name)) {
      if (other->is_dir) return nodes_[parent].children.back();
      return Fail(EINVAL, "'{}' at line {} is a file at line {} and cannot also be a folder", name,
                  line, other->line);
    }
    return Append(TempNode{name, parent, true, line, nullptr, {}});
  }

  Status AddFile(size_t depth, std::string_view name, const MemberSpec& member) {
    stack_.resize(depth);
    const uint32_t parent = Parent(depth);
    if (const TempNode* other = Clash(parent, name)) {
      if (other->is_dir) {
        return Fail(EINVAL, "'{}' at line {} is a file but a folder at line {}", member.path,
                    member.line, other->line);
      }
      return Fail(EINVAL, "path '{}' at line {} is already used at line {}", member.path,
                  member.line, other->line);
    }
    Append(TempNode{name, parent, false, member.line, &member, {}});
    return Ok{};
  }

  uint32_t Append(TempNode node) {
    const uint32_t id = static_cast<uint32_t>(nodes_.size());
    nodes_[node.parent].children.push_back(id);
    nodes_.push_back(std::move(node));
    return id;
  }

  std::vector<TempNode> nodes_;
  std::vector<uint32_t> stack_;  // folders on the path of the previous item, by depth
};

Result<Catalog> Catalog::FromSpec(const DatasetSpec& spec) {
  std::vector<PathItem> items;
  items.reserve(spec.classes.size() + spec.members.size());
  const auto& folders = spec.folders.empty() ? spec.classes : spec.folders;
  for (const std::string& folder : folders) items.push_back(PathItem{folder, nullptr});
  for (const MemberSpec& member : spec.members) items.push_back(PathItem{member.path, &member});
  // Of two identical paths the earlier line sorts first: it is kept, the later refused.
  std::sort(items.begin(), items.end(), [](const PathItem& a, const PathItem& b) {
    const int order = ComparePaths(a.path, b.path);
    if (order != 0) return order < 0;
    return (a.member ? a.member->line : 0) < (b.member ? b.member->line : 0);
  });
  CatalogBuilder builder;
  for (const PathItem& item : items) {
    if (Status s = builder.Add(item); !s) {
      return Fail(EINVAL, "cannot parse {}: {}", spec.index_file.string(), s.error().message);
    }
  }
  return std::move(builder).Build(spec);
}

Catalog::Catalog(CatalogTables tables, std::shared_ptr<const void> storage)
    : t_(std::move(tables)), storage_(std::move(storage)) {
  for (const FileExtent& file : t_.files) total_bytes_ += file.size;
}

std::string_view Catalog::Name(NodeId id) const {
  return t_.names.substr(t_.nodes[id].name_offset, t_.nodes[id].name_size);
}

std::optional<NodeId> Catalog::Find(NodeId dir, std::string_view name) const {
  const CatalogNode& node = t_.nodes[dir];
  if (!node.is_dir) return std::nullopt;
  NodeId lo = node.first;
  NodeId hi = node.first + node.count;
  while (lo < hi) {
    const NodeId mid = lo + (hi - lo) / 2;
    const int cmp = Name(mid).compare(name);
    if (cmp == 0) return mid;
    if (cmp < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return std::nullopt;
}

std::optional<NodeId> Catalog::FindPath(std::string_view path) const {
  NodeId id = kRoot;
  size_t pos = 0;
  while (pos < path.size()) {
    const size_t end = std::min(path.find('/', pos), path.size());
    if (end > pos) {
      auto child = Find(id, path.substr(pos, end - pos));
      if (!child) return std::nullopt;
      id = *child;
    }
    pos = end + 1;
  }
  return id;
}

std::string Catalog::PathOf(NodeId id) const {
  std::vector<std::string_view> parts;
  for (; id != kRoot; id = Parent(id)) parts.push_back(Name(id));
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!path.empty()) path += '/';
    path += *it;
  }
  return path;
}

}  // namespace gpufs
