#include "dataset/format/name_rules.h"

#include <fmt/format.h>

namespace gpufs {

std::string_view NameProblem(std::string_view name) {
  if (name.empty()) return "empty name";
  if (name == "." || name == "..") return "name is '.' or '..'";
  if (name.size() > kNameMax) return "name longer than 255 bytes";
  if (name.find('/') != std::string_view::npos) return "name contains '/'";
  if (name.find('\0') != std::string_view::npos) return "name contains a NUL byte";
  // Listings and the control protocol are line-based: a newline would split a name in two.
  if (name.find('\n') != std::string_view::npos) return "name contains a newline";
  return {};
}

Result<std::string> NormalizeRelativePath(std::string_view path) {
  std::string out;
  out.reserve(path.size());
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string_view segment = path.substr(pos, end - pos);
    pos = end + 1;
    if (segment.empty()) continue;  // "a//b" and a trailing '/' name the same file
    if (std::string_view why = NameProblem(segment); !why.empty()) {
      return Fail(EINVAL, "segment '{}' is invalid ({})", Printable(segment), why);
    }
    if (!out.empty()) out += '/';
    out += segment;
  }
  if (out.empty()) return Fail(EINVAL, "path names no file");
  return out;
}

}  // namespace gpufs
