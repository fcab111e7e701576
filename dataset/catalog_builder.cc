#include "dataset/catalog_builder.h"

#include <malloc.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <unordered_map>

namespace gpufs {

namespace {

constexpr uint32_t kNone = UINT32_MAX;

// Orders paths component by component: '/' sorts below every other byte, so "a/b" comes
// before "a-c" exactly as child "a" comes before sibling "a-c". Sorting whole paths this
// way yields each folder's children already in name order and puts a name's subtree
// right after it, which is what lets the walk below work without any lookup table.
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

template <typename T>
void Release(std::vector<T>& v) {
  std::vector<T>().swap(v);
}

}  // namespace

// The tables a built catalog owns.
struct CatalogBuilder::OwnedTables {
  std::vector<CatalogDir> dirs;
  std::vector<uint32_t> file_names;
  std::vector<PackedExtent> extents;
  std::vector<WideExtent> wide;
  std::vector<uint32_t> file_classes;
  std::vector<GroupExtent> groups;
  std::string names;
  std::vector<uint64_t> checksums;
  std::vector<Sha256Digest> sha256;
};

// A path: a folder (file == kNone) or file record `file`, whose line is kept apart so
// that an item stays 16 bytes with a pointer to its path.
struct CatalogBuilder::Item {
  const char* path = nullptr;
  uint32_t path_size = 0;
  uint32_t file = kNone;
};

// A folder while the tree is walked. Siblings arrive sorted, so a new name only ever needs
// comparing with the last child of its folder: that is where duplicates and file/folder
// clashes show.
struct CatalogBuilder::TempDir {
  std::string_view name;
  uint32_t parent = 0;
  uint32_t line = 0;
  std::vector<uint32_t> subdirs;  // in name order
  uint32_t files = 0;
  std::string_view last_name;  // of the last child, when there is one
  uint32_t last_line = 0;
  uint32_t last_dir = kNone;  // the last child when it is a folder
  bool has_last = false;
};

namespace {

// A file placed in its folder, in name order within the folder.
struct Placed {
  const char* name = nullptr;  // its last path component
  uint32_t dir = 0;
  uint32_t file = 0;
  uint32_t name_size = 0;
};

}  // namespace

struct CatalogBuilder::Tree {
  std::vector<TempDir> dirs;
  std::vector<Placed> files;    // in path order
  std::vector<uint32_t> stack;  // folders on the path of the previous item, by depth
};

CatalogBuilder::CatalogBuilder(std::string source, bool checksums, bool sha256)
    : source_(std::move(source)), checksums_(checksums), sha256_(sha256) {}

CatalogBuilder::~CatalogBuilder() = default;

void CatalogBuilder::Reserve(size_t files, size_t path_bytes) {
  (void)path_bytes;  // the arena grows a block at a time, copying nothing
  items_.reserve(files);
  lines_.reserve(files);
  extents_.reserve(files);
  classes_of_.reserve(files);
  if (checksums_) checksums_of_.reserve(files);
  if (sha256_) sha256_of_.reserve(files);
}

// Blob names are shared by the groups that lie in the same file (a tar archive).
uint32_t CatalogBuilder::AddGroup(std::string_view blob, uint64_t offset, uint64_t size) {
  auto [it, added] = blob_ids_.try_emplace(std::string(blob), static_cast<uint32_t>(blobs_.size()));
  if (added) blobs_.emplace_back(blob);
  groups_.push_back(GroupExtent{it->second, 0, offset, size});
  return static_cast<uint32_t>(groups_.size() - 1);
}

void CatalogBuilder::WidenGroup(uint32_t group, uint64_t end) {
  GroupExtent& g = groups_[group];
  g.size = std::max(g.size, end - g.offset);
}

Status CatalogBuilder::AddPath(std::string_view path, uint32_t line, uint32_t file) {
  if (path.size() > UINT32_MAX) {
    return Fail(EFBIG, "cannot index {}: a path exceeds 4 GiB", source_);
  }
  if (!adopted_) path = paths_.Add(path);
  items_.push_back(Item{path.data(), static_cast<uint32_t>(path.size()), file});
  if (file != kNone) lines_.push_back(line);
  return Ok{};
}

uint32_t CatalogBuilder::LineOf(const Item& item) const {
  return item.file == kNone ? 0 : lines_[item.file];
}

Status CatalogBuilder::AddFolder(std::string_view path) { return AddPath(path, 0, kNone); }

Status CatalogBuilder::AddFile(std::string_view path, const MemberRecord& m,
                               const Sha256Digest* sha256) {
  if (m.group >= groups_.size() || m.offset < groups_[m.group].offset) {
    return Fail(EINVAL, "cannot parse {}: '{}' at line {} lies outside its group", source_, path,
                m.line);
  }
  if (extents_.size() >= UINT32_MAX - 1) {
    return Fail(EFBIG, "cannot index {}: more files than a catalog can number", source_);
  }
  const uint64_t in_group = m.offset - groups_[m.group].offset;
  if (in_group >= UINT32_MAX || m.size >= kWideExtent) {
    extents_.push_back(PackedExtent{m.group, static_cast<uint32_t>(wide_.size()), kWideExtent});
    wide_.push_back(WideExtent{in_group, m.size});
  } else {
    extents_.push_back(
        PackedExtent{m.group, static_cast<uint32_t>(in_group), static_cast<uint32_t>(m.size)});
  }
  WidenGroup(m.group, m.offset + m.size);  // a group covers at least its members
  classes_of_.push_back(m.class_id);
  if (checksums_) checksums_of_.push_back(m.checksum);
  if (sha256_) sha256_of_.push_back(sha256 ? *sha256 : Sha256Digest{});
  return AddPath(path, m.line, static_cast<uint32_t>(extents_.size() - 1));
}

// The file `name` (at `path`) in folder `parent`, unless its last entry has that name.
Status CatalogBuilder::PlaceFile(Tree& tree, uint32_t parent, std::string_view path,
                                 std::string_view name, uint32_t line, uint32_t file) {
  TempDir& p = tree.dirs[parent];
  if (p.has_last && p.last_name == name) {
    if (p.last_dir != kNone) {
      return Fail(EINVAL, "cannot parse {}: '{}' at line {} is a file but a folder at line {}",
                  source_, path, line, p.last_line);
    }
    return Fail(EINVAL, "cannot parse {}: path '{}' at line {} is already used at line {}", source_,
                path, line, p.last_line);
  }
  tree.files.push_back(Placed{name.data(), parent, file, static_cast<uint32_t>(name.size())});
  ++p.files;
  p.last_name = name;
  p.last_line = line;
  p.last_dir = kNone;
  p.has_last = true;
  return Ok{};
}

// The folder `name` in folder `parent`: its last entry when that is the folder (paths come
// in order), else a new one; refused when its last entry is a file of that name.
Result<uint32_t> CatalogBuilder::PlaceFolder(Tree& tree, uint32_t parent, std::string_view name,
                                             uint32_t line) {
  const TempDir& p = tree.dirs[parent];
  if (p.has_last && p.last_name == name) {
    if (p.last_dir == kNone) {
      return Fail(EINVAL,
                  "cannot parse {}: '{}' at line {} is a file at line {} and cannot also be "
                  "a folder",
                  source_, name, line, p.last_line);
    }
    return p.last_dir;
  }
  const auto id = static_cast<uint32_t>(tree.dirs.size());
  tree.dirs.push_back(TempDir{name, parent, line});
  TempDir& folder = tree.dirs[parent];
  folder.subdirs.push_back(id);
  folder.last_name = name;
  folder.last_line = line;
  folder.last_dir = id;
  folder.has_last = true;
  return id;
}

// Places every item in the tree, folders by their path and files in their folder, in path
// order; refuses a path used twice or both as a file and a folder.
Status CatalogBuilder::Walk(Tree& tree) {
  tree.dirs.push_back(TempDir{});
  tree.files.reserve(extents_.size());
  const auto parent_at = [&](size_t depth) { return depth == 0 ? 0 : tree.stack[depth - 1]; };
  for (const Item& item : items_) {
    const std::string_view path(item.path, item.path_size);
    const uint32_t line = LineOf(item);
    size_t depth = 0;
    for (size_t pos = 0;; ++depth) {
      const size_t slash = path.find('/', pos);
      const std::string_view name = path.substr(pos, slash - pos);
      const bool last = slash == std::string_view::npos;
      if (last && item.file != kNone) {
        tree.stack.resize(depth);
        if (Status s = PlaceFile(tree, parent_at(depth), path, name, line, item.file); !s) {
          return s.error();
        }
        break;
      }
      if (depth >= tree.stack.size() || tree.dirs[tree.stack[depth]].name != name) {
        tree.stack.resize(depth);
        Result<uint32_t> id = PlaceFolder(tree, parent_at(depth), name, line);
        if (!id) return id.error();
        tree.stack.push_back(*id);
      }
      if (last) break;
      pos = slash + 1;
    }
  }
  return Ok{};
}

namespace {

size_t CommonPrefix(std::string_view a, std::string_view b) {
  const size_t n = std::min(a.size(), b.size());
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

}  // namespace

// Archives are mostly written a folder at a time, each folder's files in order: the items
// then form a few ascending runs, which put in order by their first items are all in
// order. That is checked in one pass over the items, where sorting them costs n log n
// comparisons of paths that lie all over the arena (5 s at 14 M files); any other order
// is sorted.
template <typename Before>
void CatalogBuilder::SortItems(const Before& before) {
  std::vector<std::pair<uint32_t, uint32_t>> runs;  // [begin, end) of each ascending run
  for (uint32_t i = 0; i < items_.size(); ++i) {
    if (i == 0 || before(items_[i], items_[i - 1])) runs.emplace_back(i, i);
    runs.back().second = i + 1;
    if (runs.size() > items_.size() / 64 + 1) break;  // short runs: not worth it
  }
  if (runs.size() <= 1) return;
  if (runs.size() <= items_.size() / 64 + 1) {
    std::sort(runs.begin(), runs.end(), [&](const auto& a, const auto& b) {
      return before(items_[a.first], items_[b.first]);
    });
    std::vector<Item> joined;
    joined.reserve(items_.size());
    for (const auto& [begin, end] : runs) {
      joined.insert(joined.end(), items_.begin() + begin, items_.begin() + end);
    }
    if (std::is_sorted(joined.begin(), joined.end(), before)) {
      items_ = std::move(joined);
      return;
    }
  }
  std::sort(items_.begin(), items_.end(), before);
}

Result<Catalog> CatalogBuilder::Build() && {
  // Of two identical paths the earlier line sorts first: it is kept, the later refused.
  const auto before = [&](const Item& a, const Item& b) {
    const int order =
        ComparePaths(std::string_view(a.path, a.path_size), std::string_view(b.path, b.path_size));
    return order != 0 ? order < 0 : LineOf(a) < LineOf(b);
  };
  SortItems(before);
  Tree tree;
  if (Status s = Walk(tree); !s) return s.error();
  Release(items_);
  Release(lines_);
  auto out = std::make_shared<OwnedTables>();
  // Folders breadth-first, so that each folder's subfolders are contiguous.
  std::vector<uint32_t> bfs{0};
  std::vector<uint32_t> new_id(tree.dirs.size());
  for (size_t q = 0; q < bfs.size(); ++q) {
    for (uint32_t child : tree.dirs[bfs[q]].subdirs) {
      new_id[child] = static_cast<uint32_t>(bfs.size());
      bfs.push_back(child);
    }
  }
  out->dirs.resize(bfs.size());
  uint32_t next_file = 0;
  for (uint32_t id = 0; id < bfs.size(); ++id) {
    const TempDir& t = tree.dirs[bfs[id]];
    CatalogDir& d = out->dirs[id];
    d.parent = new_id[t.parent];
    d.dir_count = static_cast<uint32_t>(t.subdirs.size());
    d.first_dir = t.subdirs.empty() ? 0 : new_id[t.subdirs.front()];
    d.first_file = next_file;
    d.file_count = t.files;
    next_file += t.files;
  }
  // Files by folder, each folder's in name order (the walk's order, kept by a stable count).
  std::vector<uint32_t> order(tree.files.size());
  {
    std::vector<uint32_t> at(out->dirs.size());
    for (uint32_t id = 0; id < at.size(); ++id) at[id] = out->dirs[id].first_file;
    for (uint32_t i = 0; i < tree.files.size(); ++i) order[at[new_id[tree.files[i].dir]]++] = i;
  }
  if (Status s = WriteNames(tree, bfs, order, *out); !s) return s.error();
  Release(tree.dirs);
  paths_ = PathArena{};  // every name is now in the tables
  malloc_trim(0);        // the arena's blocks may lie in the heap
  if (Status s = WriteFiles(tree, order, *out); !s) return s.error();
  return Finish(std::move(out));
}

// Folder names and prefixes first, then the files' suffixes in file order, so that each
// suffix ends where the next begins.
Status CatalogBuilder::WriteNames(const Tree& tree, const std::vector<uint32_t>& bfs,
                                  const std::vector<uint32_t>& order, OwnedTables& out) const {
  const auto name_of = [&](const Placed& p) { return std::string_view(p.name, p.name_size); };
  std::string& names = out.names;
  for (uint32_t id = 0; id < bfs.size(); ++id) {
    CatalogDir& d = out.dirs[id];
    const std::string_view name = tree.dirs[bfs[id]].name;
    d.name_offset = static_cast<uint32_t>(names.size());
    d.name_size = static_cast<uint32_t>(name.size());
    names += name;
    if (d.file_count == 0) continue;
    const std::string_view first = name_of(tree.files[order[d.first_file]]);
    const std::string_view last = name_of(tree.files[order[d.first_file + d.file_count - 1]]);
    d.prefix_offset = static_cast<uint32_t>(names.size());
    d.prefix_size = static_cast<uint32_t>(CommonPrefix(first, last));
    names += first.substr(0, d.prefix_size);
    d.class_id = classes_of_[tree.files[order[d.first_file]].file];
  }
  // The suffixes' size first: growing by doubling would hold the old copy beside the new.
  size_t suffixes = 0;
  for (const Placed& p : tree.files) suffixes += p.name_size;
  for (const CatalogDir& d : out.dirs) suffixes -= size_t{d.prefix_size} * d.file_count;
  names.reserve(names.size() + suffixes);
  out.file_names.resize(order.size() + 1);
  uint32_t dir = 0;
  for (uint32_t i = 0; i < order.size(); ++i) {
    while (i >= out.dirs[dir].first_file + out.dirs[dir].file_count) ++dir;
    if (names.size() > UINT32_MAX) break;
    const Placed& file = tree.files[order[i]];
    if (classes_of_[file.file] >= classes_.size()) {
      return Fail(EINVAL, "cannot parse {}: the member '{}' names a missing class", source_,
                  name_of(file));
    }
    out.file_names[i] = static_cast<uint32_t>(names.size());
    names += name_of(file).substr(out.dirs[dir].prefix_size);
  }
  if (names.size() > UINT32_MAX) {
    return Fail(EFBIG, "cannot index {}: its names exceed 4 GiB", source_);
  }
  out.file_names[order.size()] = static_cast<uint32_t>(names.size());
  names.shrink_to_fit();
  return Ok{};
}

// Each file's records, moved to its place (WriteNames checked each file's class).
Status CatalogBuilder::WriteFiles(const Tree& tree, const std::vector<uint32_t>& order,
                                  OwnedTables& out) {
  const size_t n = order.size();
  out.extents.resize(n);
  bool by_folder = true;
  uint32_t dir = 0;
  for (uint32_t i = 0; i < n; ++i) {
    while (i >= out.dirs[dir].first_file + out.dirs[dir].file_count) ++dir;
    const uint32_t f = tree.files[order[i]].file;
    const PackedExtent& e = extents_[f];
    out.extents[i] = e;
    by_folder = by_folder && classes_of_[f] == out.dirs[dir].class_id;
  }
  Release(extents_);
  if (!by_folder) {
    out.file_classes.resize(n);
    for (uint32_t i = 0; i < n; ++i) out.file_classes[i] = classes_of_[tree.files[order[i]].file];
  }
  Release(classes_of_);
  if (checksums_) {
    out.checksums.resize(n);
    for (uint32_t i = 0; i < n; ++i) out.checksums[i] = checksums_of_[tree.files[order[i]].file];
    Release(checksums_of_);
  }
  if (sha256_) {
    out.sha256.resize(n);
    for (uint32_t i = 0; i < n; ++i) out.sha256[i] = sha256_of_[tree.files[order[i]].file];
    Release(sha256_of_);
  }
  out.wide = std::move(wide_);
  out.groups = std::move(groups_);
  return Ok{};
}

Catalog CatalogBuilder::Finish(std::shared_ptr<OwnedTables> out) {
  CatalogTables t;
  t.dirs = out->dirs;
  t.file_names = out->file_names;
  t.extents = out->extents;
  t.wide = out->wide;
  t.file_classes = out->file_classes;
  t.groups = out->groups;
  t.names = out->names;
  t.classes = std::move(classes_);
  t.blobs = std::move(blobs_);
  t.checksums = out->checksums;
  t.sha256 = out->sha256;
  return Catalog(std::move(t), std::move(out));
}

Result<Catalog> CatalogFromSpec(const DatasetSpec& spec) {
  CatalogBuilder builder(spec.index_file.string(), spec.has_checksums, spec.has_sha256);
  builder.SetClasses(spec.classes);
  for (const GroupSpec& g : spec.groups) builder.AddGroup(g.blob, g.offset, g.size);
  const auto& folders = spec.folders.empty() ? spec.classes : spec.folders;
  for (const std::string& folder : folders) {
    if (Status s = builder.AddFolder(folder); !s) return s.error();
  }
  for (const MemberSpec& m : spec.members) {
    const MemberRecord record{m.class_id, m.group, m.offset, m.size, m.checksum, m.line};
    if (Status s = builder.AddFile(m.path, record, spec.has_sha256 ? &m.sha256 : nullptr); !s) {
      return s.error();
    }
  }
  return std::move(builder).Build();
}

}  // namespace gpufs
