#include "dataset/format/tree_shape.h"

#include <algorithm>
#include <map>
#include <set>

namespace gpufs {
namespace {

std::string_view FirstSegment(std::string_view path) { return path.substr(0, path.find('/')); }

size_t Depth(std::string_view path) { return std::count(path.begin(), path.end(), '/'); }

// What lies directly below a prefix: the names of folders, and whether any file does.
struct Level {
  std::set<std::string_view> folders;
  bool has_files = false;
};

template <typename Path>
Level LevelBelow(const std::vector<Path>& paths, std::string_view prefix) {
  Level level;
  std::string_view last;  // the folder last inserted: a folder's files mostly come together
  for (const Path& p : paths) {
    std::string_view path = p;
    if (!path.starts_with(prefix)) continue;
    path.remove_prefix(prefix.size());
    const size_t slash = path.find('/');
    if (slash == std::string_view::npos) {
      level.has_files = true;
    } else if (path.substr(0, slash) != last || level.folders.empty()) {
      last = path.substr(0, slash);
      level.folders.insert(last);
    }
  }
  return level;
}

// Looks through a lone top folder that holds folders (and perhaps stray files, like the
// CSV beside train/ and val/ in imagenette2); a lone folder of files only is a class.
template <typename Path>
std::string StripWrappers(const std::vector<Path>& paths) {
  std::string prefix;
  for (;;) {
    const Level top = LevelBelow(paths, prefix);
    if (top.has_files || top.folders.size() != 1) return prefix;
    const std::string next = prefix + std::string(*top.folders.begin()) + "/";
    if (LevelBelow(paths, next).folders.empty()) return prefix;
    prefix = next;
  }
}

// Splits when every top folder holds folders only, and some hold class folders with files.
template <typename Path>
bool LooksSplit(const std::vector<Path>& paths, std::string_view prefix) {
  std::map<std::string_view, bool> direct_files;  // top folder -> has files directly
  bool any_deep = false;
  std::string_view last;  // the top folder of the previous path, and its entry
  bool* direct = nullptr;
  for (const Path& p : paths) {
    std::string_view path = std::string_view(p).substr(prefix.size());
    const size_t depth = Depth(path);
    if (depth == 0) continue;
    if (direct == nullptr || FirstSegment(path) != last) {
      last = FirstSegment(path);
      direct = &direct_files[last];
    }
    *direct = *direct || depth == 1;
    any_deep = any_deep || depth >= 2;
  }
  if (!any_deep || direct_files.empty()) return false;
  return std::none_of(direct_files.begin(), direct_files.end(),
                      [](const auto& entry) { return entry.second; });
}

}  // namespace

Result<TreeShape> ShapeTree(const std::vector<std::string>& paths, SplitMode mode,
                            bool strip_wrappers, const std::string& label) {
  std::vector<std::string> copy = paths;
  return ShapeTree(std::move(copy), mode, strip_wrappers, label);
}

namespace {

// Shapes `paths` (strings or views of them); `take(i, stripped)` is told of each file inside
// a class folder, in input order, before the classes are numbered.
template <typename Path, typename Take>
Result<TreeShape> Shape(const std::vector<Path>& paths, SplitMode mode, bool strip_wrappers,
                        const std::string& label, Take take) {
  TreeShape shape;
  if (paths.empty()) return Fail(EINVAL, "cannot use {}: it holds no files", label);
  shape.stripped = strip_wrappers ? StripWrappers(paths) : "";
  shape.splits =
      mode == SplitMode::kSplits || (mode == SplitMode::kAuto && LooksSplit(paths, shape.stripped));
  const size_t class_depth = shape.splits ? 1 : 0;  // slashes before the class name
  std::set<std::string, std::less<>> classes;
  std::set<std::string, std::less<>> folders;
  size_t inside = 0;
  std::string last_folder;  // a copy: the string overload moves each path away
  for (size_t i = 0; i < paths.size(); ++i) {
    std::string_view path = std::string_view(paths[i]).substr(shape.stripped.size());
    if (Depth(path) <= class_depth) {
      shape.outside.emplace_back(paths[i]);
      continue;
    }
    size_t end = path.find('/');
    if (shape.splits) end = path.find('/', end + 1);
    const std::string_view folder = path.substr(0, end);
    const size_t start = folder.rfind('/');
    // Files of a folder mostly come together: the sets are looked up only when the folder
    // changes, and before adding, since a set's emplace makes a string first, every time.
    if (folder != last_folder) {
      const std::string_view name = folder.substr(start == std::string_view::npos ? 0 : start + 1);
      if (!classes.contains(name)) classes.emplace(name);
      if (!folders.contains(folder)) folders.emplace(folder);
      last_folder.assign(folder);
    }
    ++inside;
    take(shape, i);
  }
  if (inside == 0) {
    return Fail(EINVAL, "cannot use {}: no class folders with files in it ({} files outside)",
                label, shape.outside.size());
  }
  shape.classes.assign(classes.begin(), classes.end());
  shape.folders.assign(folders.begin(), folders.end());
  return shape;
}

// The class of a path below the stripped wrappers.
uint32_t ClassOf(const TreeShape& shape, std::string_view path) {
  if (shape.splits) path.remove_prefix(path.find('/') + 1);
  const auto it = std::lower_bound(shape.classes.begin(), shape.classes.end(), FirstSegment(path));
  return static_cast<uint32_t>(it - shape.classes.begin());
}

}  // namespace

Result<TreeShape> ShapeTree(std::vector<std::string>&& paths, SplitMode mode, bool strip_wrappers,
                            const std::string& label) {
  auto shape = Shape(paths, mode, strip_wrappers, label, [&](TreeShape& s, size_t i) {
    paths[i].erase(0, s.stripped.size());
    s.files.push_back(ShapedFile{i, std::move(paths[i]), 0});
  });
  if (!shape) return shape;
  for (ShapedFile& f : shape->files) f.class_id = ClassOf(*shape, f.tree_path);
  return shape;
}

Result<TreeShape> ShapeTreeOfViews(const std::vector<std::string_view>& paths, SplitMode mode,
                                   bool strip_wrappers, const std::string& label) {
  auto shape = Shape(paths, mode, strip_wrappers, label, [](TreeShape&, size_t) {});
  if (!shape) return shape;
  shape->file_classes.reserve(paths.size());
  for (std::string_view path : paths) {
    path.remove_prefix(shape->stripped.size());
    shape->file_classes.push_back(Depth(path) <= (shape->splits ? 1u : 0u) ? kOutsideClasses
                                                                           : ClassOf(*shape, path));
  }
  return shape;
}

}  // namespace gpufs
