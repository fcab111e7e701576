#include "dataset/format/source_advice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

namespace gpufs {
namespace {

// How far into a folder TreeAdvice looks: enough to see an ImageFolder tree's shape,
// bounded so that a mistaken mount of a huge folder answers at once.
constexpr int kDepth = 3;
constexpr int kEntriesPerFolder = 64;

bool IsImageName(const std::filesystem::path& name) {
  std::string ext = name.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* image : {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".gif"}) {
    if (ext == image) return true;
  }
  return false;
}

// Whether a folder below `folder` (not `folder` itself), at most `depth` levels down,
// holds an image.
bool ImagesBelow(const std::filesystem::path& folder, int depth) {
  std::error_code ec;
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    if (++seen > kEntriesPerFolder) break;
    if (!entry.is_directory(ec) || entry.is_symlink(ec)) continue;
    int files = 0;
    for (const auto& inner : std::filesystem::directory_iterator(entry.path(), ec)) {
      if (++files > kEntriesPerFolder) break;
      if (inner.is_regular_file(ec) && IsImageName(inner.path().filename())) return true;
    }
    if (depth > 1 && ImagesBelow(entry.path(), depth - 1)) return true;
  }
  return false;
}

}  // namespace

bool HasUrlScheme(std::string_view source) {
  const size_t colon = source.find(':');
  if (colon == 0 || colon == std::string_view::npos || colon + 1 >= source.size() ||
      source[colon + 1] != '/' || !std::isalpha(static_cast<unsigned char>(source[0]))) {
    return false;
  }
  return std::all_of(source.begin(), source.begin() + colon, [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
  });
}

std::string UrlAdvice(std::string_view source) {
  const std::string_view scheme = source.substr(0, source.find(':'));
  const std::string_view rest = source.substr(scheme.size() + 1);
  std::string advice = "gpufs reads a local path, s3://BUCKET/PREFIX/ or http(s)://HOST/PATH/";
  if ((scheme == "s3" || scheme == "http" || scheme == "https") && !rest.starts_with("//")) {
    const size_t path = std::min(rest.find_first_not_of('/'), rest.size());
    advice += fmt::format("; did you mean {}://{}?", scheme, rest.substr(path));
  } else if (scheme != "s3" && scheme != "http" && scheme != "https") {
    advice += fmt::format(", not {}://", scheme);
  }
  return advice;
}

std::string TreeAdvice(const std::filesystem::path& folder) {
  if (!ImagesBelow(folder, kDepth)) return {};
  return fmt::format(
      "it is an ImageFolder tree (folders of images), which gpufs serves grouped: `gpufsd pack "
      "{0} {0}.gpufs` packs it once (a second copy, in blobs) and {0}.gpufs mounts; or a tar of "
      "it mounts in place (`tar cf {0}.tar -C {0} .`, then `gpufsd mount {0}.tar MNT`)",
      folder.string());
}

}  // namespace gpufs
