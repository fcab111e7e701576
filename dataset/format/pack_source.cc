#include "dataset/format/pack_source.h"

#include <sys/stat.h>

#include <cstring>

#include "dataset/format/tar.h"

namespace gpufs {

Result<PackSource> ScanTree(const std::filesystem::path& root) {
  namespace stdfs = std::filesystem;
  PackSource source;
  source.label = root.string();
  std::error_code ec;
  if (!stdfs::is_directory(root, ec)) {
    return Fail(ENOTDIR, "cannot pack {}: {}", root.string(),
                stdfs::exists(root, ec) ? "not a folder" : "no such folder");
  }
  const auto options = stdfs::directory_options::follow_directory_symlink;
  stdfs::recursive_directory_iterator it(root, options, ec);
  for (; !ec && it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
    struct stat st {};
    const stdfs::path& path = it->path();
    if (stat(path.c_str(), &st) != 0) {
      return Fail(errno, "cannot pack {}: cannot stat {}: {}", root.string(), path.string(),
                  strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) continue;
    const std::string rel = path.lexically_relative(root).generic_string();
    source.entries.push_back(SourceEntry{rel, static_cast<uint32_t>(source.files.size()), 0,
                                         static_cast<uint64_t>(st.st_size)});
    source.files.push_back(path.string());
  }
  if (ec) {
    return Fail(ec.value(), "cannot pack {}: cannot list a folder in it: {}", root.string(),
                ec.message());
  }
  return source;
}

Result<PackSource> ScanSource(const std::filesystem::path& source) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(source, ec)) return ScanTree(source);
  if (!LooksLikeTar(source)) {
    return Fail(EINVAL, "cannot pack {}: not a folder nor an uncompressed tar archive",
                source.string());
  }
  auto listing = ListTar(source);
  if (!listing) return listing.error();
  PackSource out;
  out.label = source.string();
  out.files = {source.string()};
  out.strip_wrappers = true;
  for (const TarEntry& e : listing->entries) {
    out.entries.push_back(SourceEntry{std::string(e.path), 0, e.offset, e.size});
  }
  return out;
}

}  // namespace gpufs
