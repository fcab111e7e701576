// Which names may appear in the tree. Names are arbitrary bytes (UTF-8 in practice) as
// long as the kernel can represent them as one path component.
#pragma once

#include <string>
#include <string_view>

#include "base/error.h"
#include "dataset/printable.h"  // Printable, for the messages that name a name

namespace gpufs {

inline constexpr size_t kNameMax = 255;  // NAME_MAX: longest path component

// Empty when `name` is a valid single component, else why it is not.
std::string_view NameProblem(std::string_view name);

// Joins the non-empty '/'-separated segments of `path`, refusing '.', '..' and overlong
// segments. `path` must name at least one segment.
Result<std::string> NormalizeRelativePath(std::string_view path);

}  // namespace gpufs
