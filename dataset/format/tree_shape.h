// How a list of file paths maps onto an ImageFolder tree: which folders are classes, and
// whether split folders (train/, val/, any names) stand above them.
//
//   <class>/<file...>            classes at the top
//   <split>/<class>/<file...>    splits: every top folder holds only folders
//
// Archives often wrap everything in one folder ("imagenette2/train/..."); with
// `strip_wrappers` a lone top folder that holds folders is looked through.
// Files outside any class folder are not part of an ImageFolder dataset: they are left
// out and counted, so the caller can say so.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"

namespace gpufs {

enum class SplitMode { kAuto, kSplits, kNoSplits };

struct ShapedFile {
  size_t input = 0;       // index of the path in the input
  std::string tree_path;  // "<class>/..." or "<split>/<class>/..."
  uint32_t class_id = 0;
};

// The class of a path outside any class folder, in TreeShape::file_classes.
inline constexpr uint32_t kOutsideClasses = UINT32_MAX;

struct TreeShape {
  std::vector<std::string> classes;  // sorted, unique class names
  std::vector<std::string> folders;  // every class folder, "<class>" or "<split>/<class>"
  std::vector<ShapedFile> files;     // in input order
  // From views: each input path's class, or kOutsideClasses; `files` is left empty (its
  // tree paths are the inputs less `stripped`).
  std::vector<uint32_t> file_classes;
  std::vector<std::string> outside;  // paths left out: not inside a class folder
  std::string stripped;              // wrapper folders looked through, "" or "a/b/"
  bool splits = false;
};

// `paths` are '/'-separated and normalized (no empty, '.' or '..' segments). `label` names
// the source in errors.
Result<TreeShape> ShapeTree(const std::vector<std::string>& paths, SplitMode mode,
                            bool strip_wrappers, const std::string& label);
// As above, moving each path into its ShapedFile rather than copying it (a tar of 14 M
// members would otherwise hold every path twice); `paths` is left with empty strings.
Result<TreeShape> ShapeTree(std::vector<std::string>&& paths, SplitMode mode, bool strip_wrappers,
                            const std::string& label);
// As above over views, filling `file_classes` rather than `files`: no path is copied.
Result<TreeShape> ShapeTreeOfViews(const std::vector<std::string_view>& paths, SplitMode mode,
                                   bool strip_wrappers, const std::string& label);

}  // namespace gpufs
