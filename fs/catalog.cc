#include "fs/catalog.h"

#include <algorithm>
#include <deque>
#include <memory>

namespace gpufs {

// Collects paths into a mutable tree, then flattens it breadth-first into a Catalog.
class CatalogBuilder {
 public:
  CatalogBuilder() { nodes_.push_back(TempNode{"", 0, true, 0, {}, {}, 0}); }

  Result<uint32_t> AddDirs(std::string_view path, uint32_t line) {
    uint32_t dir = 0;
    size_t pos = 0;
    while (pos < path.size()) {
      size_t end = std::min(path.find('/', pos), path.size());
      auto child = Child(dir, path.substr(pos, end - pos), true, line);
      if (!child) return child.error();
      dir = *child;
      pos = end + 1;
    }
    return dir;
  }

  Status AddFile(const MemberSpec& member) {
    const size_t slash = member.path.rfind('/');
    auto dir = AddDirs(std::string_view(member.path).substr(0, slash), member.line);
    if (!dir) return dir.error();
    const std::string_view name = std::string_view(member.path).substr(slash + 1);
    if (auto it = nodes_[*dir].index.find(std::string(name)); it != nodes_[*dir].index.end()) {
      return Fail(EINVAL, "path '{}' at line {} is already used at line {}", member.path,
                  member.line, nodes_[it->second].line);
    }
    const uint32_t id = Append(*dir, name, false, member.line);
    nodes_[id].extent = FileExtent{member.group, member.class_id, member.offset, member.size};
    return Ok{};
  }

  Catalog Build(const DatasetSpec& spec) && {
    Catalog out;
    out.classes_ = spec.classes;
    for (const GroupSpec& g : spec.groups) out.blobs_.push_back(g.blob);
    out.nodes_.reserve(nodes_.size());
    std::deque<uint32_t> queue{0};
    std::vector<uint32_t> new_id(nodes_.size());
    out.nodes_.push_back(Catalog::Node{});
    while (!queue.empty()) {
      const uint32_t old = queue.front();
      queue.pop_front();
      TempNode& node = nodes_[old];
      Catalog::Node& flat = out.nodes_[new_id[old]];
      flat.name_offset = static_cast<uint32_t>(out.names_.size());
      flat.name_size = static_cast<uint32_t>(node.name.size());
      out.names_ += node.name;
      flat.is_dir = node.is_dir;
      if (!node.is_dir) {
        flat.first = static_cast<uint32_t>(out.files_.size());
        out.files_.push_back(node.extent);
        out.total_bytes_ += node.extent.size;
        continue;
      }
      std::sort(node.children.begin(), node.children.end(),
                [&](uint32_t a, uint32_t b) { return nodes_[a].name < nodes_[b].name; });
      flat.first = static_cast<uint32_t>(out.nodes_.size());
      flat.count = static_cast<uint32_t>(node.children.size());
      const NodeId parent = new_id[old];
      for (uint32_t child : node.children) {
        new_id[child] = static_cast<uint32_t>(out.nodes_.size());
        out.nodes_.push_back(Catalog::Node{.parent = parent});
        if (nodes_[child].is_dir) ++out.nodes_[parent].subdirs;
        queue.push_back(child);
      }
    }
    return out;
  }

 private:
  struct TempNode {
    std::string name;
    uint32_t parent = 0;
    bool is_dir = false;
    uint32_t line = 0;
    std::vector<uint32_t> children;
    std::unordered_map<std::string, uint32_t> index;  // dirs only: name -> node
    FileExtent extent;
  };

  Result<uint32_t> Child(uint32_t dir, std::string_view name, bool want_dir, uint32_t line) {
    auto it = nodes_[dir].index.find(std::string(name));
    if (it == nodes_[dir].index.end()) return Append(dir, name, want_dir, line);
    if (!nodes_[it->second].is_dir) {
      return Fail(EINVAL, "'{}' at line {} is a file at line {} and cannot also be a folder", name,
                  line, nodes_[it->second].line);
    }
    return it->second;
  }

  uint32_t Append(uint32_t dir, std::string_view name, bool is_dir, uint32_t line) {
    const uint32_t id = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back(TempNode{std::string(name), dir, is_dir, line, {}, {}, {}});
    nodes_[dir].children.push_back(id);
    nodes_[dir].index.emplace(name, id);
    return id;
  }

  std::vector<TempNode> nodes_;
};

Result<Catalog> Catalog::FromSpec(const DatasetSpec& spec) {
  CatalogBuilder builder;
  for (const std::string& cls : spec.classes) {
    if (auto dir = builder.AddDirs(cls, 0); !dir) return dir.error();
  }
  for (const MemberSpec& member : spec.members) {
    if (Status s = builder.AddFile(member); !s) {
      return Fail(EINVAL, "cannot parse {}: {}", spec.index_file.string(), s.error().message);
    }
  }
  return std::move(builder).Build(spec);
}

std::string_view Catalog::Name(NodeId id) const {
  return std::string_view(names_).substr(nodes_[id].name_offset, nodes_[id].name_size);
}

std::optional<NodeId> Catalog::Find(NodeId dir, std::string_view name) const {
  const Node& node = nodes_[dir];
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
