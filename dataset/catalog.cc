#include "dataset/catalog.h"

#include <algorithm>

namespace gpufs {

int CatalogName::compare(std::string_view other) const {
  const size_t n = std::min(prefix.size(), other.size());
  if (const int c = prefix.substr(0, n).compare(other.substr(0, n)); c != 0) return c;
  if (prefix.size() > other.size()) return 1;
  return rest.compare(other.substr(prefix.size()));
}

int CatalogName::compare(const CatalogName& other) const {
  if (prefix == other.prefix) return rest.compare(other.rest);
  if (other.prefix.empty()) return compare(other.rest);
  if (prefix.empty()) return -other.compare(rest);
  return str().compare(other.str());  // two folders' files: never on a lookup's path
}

Catalog::Catalog(CatalogTables tables, std::shared_ptr<const void> storage)
    : t_(std::move(tables)), storage_(std::move(storage)) {
  // Bounds-checked here alone: a writer's test may hand over tables no reader accepts.
  for (const PackedExtent& e : t_.extents) {
    if (e.size != kWideExtent) {
      total_bytes_ += e.size;
    } else if (e.offset < t_.wide.size()) {
      total_bytes_ += t_.wide[e.offset].size;
    }
  }
}

CatalogName Catalog::Name(NodeId id) const {
  if (!IsDir(id)) {
    const uint32_t index = FileIndex(id);
    return FileName(t_.dirs[DirOf(index)], index);
  }
  const CatalogDir& d = t_.dirs[id];
  return CatalogName{{}, t_.names.substr(d.name_offset, d.name_size)};
}

CatalogName Catalog::FileName(const CatalogDir& dir, uint32_t index) const {
  const uint32_t from = t_.file_names[index];
  return CatalogName{t_.names.substr(dir.prefix_offset, dir.prefix_size),
                     t_.names.substr(from, t_.file_names[index + 1] - from)};
}

// Folders' file runs follow one another in folder order, an empty folder's run starting
// where the next one does: the last folder whose run starts at or before `index` holds it.
NodeId Catalog::DirOf(uint32_t index) const {
  auto it = std::upper_bound(t_.dirs.begin(), t_.dirs.end(), index,
                             [](uint32_t i, const CatalogDir& d) { return i < d.first_file; });
  return static_cast<NodeId>(it - t_.dirs.begin()) - 1;
}

// The k-th of two sorted runs merged: the number of subfolders before it is found by a
// binary search (a merge path), so a readdir at any offset costs a logarithm, not a walk.
NodeId Catalog::ChildAt(NodeId dir, uint32_t k) const {
  const CatalogDir& d = t_.dirs[dir];
  if (d.file_count == 0) return d.first_dir + k;
  if (d.dir_count == 0) return FileNode(d.first_file + k);
  const auto dir_name = [&](uint32_t i) { return Name(d.first_dir + i).rest; };
  const auto file_name = [&](uint32_t j) { return FileName(d, d.first_file + j); };
  uint32_t lo = k > d.file_count ? k - d.file_count : 0;
  uint32_t hi = std::min(k, d.dir_count);
  while (lo < hi) {  // the fewest subfolders i such that subfolder i sorts after file k-i-1
    const uint32_t i = lo + (hi - lo) / 2;
    if (file_name(k - i - 1).compare(dir_name(i)) > 0) {
      lo = i + 1;
    } else {
      hi = i;
    }
  }
  const uint32_t j = k - lo;
  if (lo < d.dir_count && (j >= d.file_count || file_name(j).compare(dir_name(lo)) > 0)) {
    return d.first_dir + lo;
  }
  return FileNode(d.first_file + j);
}

FileExtent Catalog::ExtentAt(uint32_t index) const {
  const PackedExtent& e = t_.extents[index];
  const GroupExtent& g = t_.groups[e.group];
  if (e.size == kWideExtent) {
    const WideExtent& w = t_.wide[e.offset];
    return FileExtent{e.group, g.offset + w.offset, w.size};
  }
  return FileExtent{e.group, g.offset + e.offset, e.size};
}

uint64_t Catalog::SizeAt(uint32_t index) const {
  const PackedExtent& e = t_.extents[index];
  return e.size == kWideExtent ? t_.wide[e.offset].size : e.size;
}

uint32_t Catalog::ClassAt(uint32_t index) const {
  return t_.file_classes.empty() ? t_.dirs[DirOf(index)].class_id : t_.file_classes[index];
}

std::optional<NodeId> Catalog::Find(NodeId dir, std::string_view name) const {
  if (!IsDir(dir)) return std::nullopt;
  const CatalogDir& d = t_.dirs[dir];
  NodeId lo = d.first_dir;
  NodeId hi = d.first_dir + d.dir_count;
  while (lo < hi) {
    const NodeId mid = lo + (hi - lo) / 2;
    const int cmp = Name(mid).rest.compare(name);
    if (cmp == 0) return mid;
    if (cmp < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return FindFile(d, name);
}

// Every file name here starts with the folder's prefix, so only the suffixes are searched.
std::optional<NodeId> Catalog::FindFile(const CatalogDir& d, std::string_view name) const {
  const std::string_view prefix = t_.names.substr(d.prefix_offset, d.prefix_size);
  if (d.file_count == 0 || !name.starts_with(prefix)) return std::nullopt;
  const std::string_view suffix = name.substr(prefix.size());
  uint32_t lo = d.first_file;
  uint32_t hi = d.first_file + d.file_count;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    const uint32_t from = t_.file_names[mid];
    const int cmp = t_.names.substr(from, t_.file_names[mid + 1] - from).compare(suffix);
    if (cmp == 0) return FileNode(mid);
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
  std::vector<CatalogName> parts;
  for (; id != kRoot; id = Parent(id)) parts.push_back(Name(id));
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!path.empty()) path += '/';
    it->AppendTo(path);
  }
  return path;
}

}  // namespace gpufs
