#include "fs/format/open_dataset.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

#include "fs/format/mytar.h"

namespace gpufs {
namespace {

struct timespec MtimeOf(const std::filesystem::path& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_mtim : timespec{};
}

// Each blob must exist and hold at least the bytes the index expects of it.
Status CheckBlobFiles(const Dataset& d) {
  for (size_t b = 0; b < d.blobs.size(); ++b) {
    const std::filesystem::path path = d.dir / d.catalog.blobs()[b];
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) {
      return Fail(errno, "cannot open blob {} (listed in {}): {}", path.string(), d.index.string(),
                  strerror(errno));
    }
    if (static_cast<uint64_t>(st.st_size) < d.blobs[b].size) {
      return Fail(EINVAL, "cannot use blob {}: it is {} bytes but {} says {}; it is truncated",
                  path.string(), st.st_size, d.index.string(), d.blobs[b].size);
    }
  }
  return Ok{};
}

Result<Dataset> OpenNative(const std::filesystem::path& dir, const std::string& format) {
  const std::filesystem::path index = dir / kNativeIndexName;
  auto opened = OpenNativeIndex(index);
  if (!opened) return opened.error();
  Dataset d{
      dir, std::move(opened->catalog), std::move(opened->info.blobs), format, index, MtimeOf(index),
      {}};
  if (Status s = CheckBlobFiles(d); !s) return s.error();
  return d;
}

// The mytar folder's own index, when it describes metadata.txt as it is now.
std::optional<Result<Dataset>> OpenMytarIndex(const std::filesystem::path& dir,
                                              std::vector<std::string>& notes) {
  std::error_code ec;
  if (!std::filesystem::exists(dir / kNativeIndexName, ec)) return std::nullopt;
  auto opened = OpenNativeIndex(dir / kNativeIndexName);
  auto now = StampOf(dir / kMytarIndexName);
  if (!opened || !now || !(opened->info.source == *now)) {
    notes.push_back(fmt::format(
        "{} does not match {}; parsing the text instead (run `gpufsd "
        "index {}` to rebuild it)",
        (dir / kNativeIndexName).string(), (dir / kMytarIndexName).string(), dir.string()));
    return std::nullopt;
  }
  return OpenNative(dir, "mytar+index");
}

}  // namespace

Result<Dataset> OpenMytarText(const std::filesystem::path& dir) {
  auto spec = ReadMytarDataset(dir);
  if (!spec) return spec.error();
  auto catalog = Catalog::FromSpec(*spec);
  if (!catalog) return catalog.error();
  Dataset d{dir, std::move(*catalog), {}, "mytar", spec->index_file, MtimeOf(spec->index_file), {}};
  for (const GroupSpec& g : spec->groups) d.blobs.push_back(BlobInfo{g.offset + g.size, 0});
  return d;
}

Result<Dataset> OpenDataset(const std::filesystem::path& src_in, const OpenOptions& options) {
  const std::filesystem::path src = std::filesystem::absolute(src_in).lexically_normal();
  std::error_code ec;
  const bool native = std::filesystem::is_regular_file(src / kNativeIndexName, ec) &&
                      !std::filesystem::exists(src / kMytarIndexName, ec);
  if (native) return OpenNative(src, "native");
  auto dir = ResolveMytarDir(src, options.group_size);
  if (!dir) return dir.error();
  std::vector<std::string> notes;
  auto indexed = OpenMytarIndex(*dir, notes);
  Result<Dataset> d = indexed ? std::move(*indexed) : OpenMytarText(*dir);
  if (d) d->notes.insert(d->notes.end(), notes.begin(), notes.end());
  return d;
}

Catalog WithFileChecksums(const Catalog& catalog, const std::vector<uint64_t>& checksums) {
  struct Storage {
    Catalog base;  // keeps every other table alive
    std::vector<FileExtent> files;
  };
  auto storage = std::make_shared<Storage>(
      Storage{catalog, {catalog.tables().files.begin(), catalog.tables().files.end()}});
  for (size_t i = 0; i < storage->files.size(); ++i) storage->files[i].checksum = checksums[i];
  CatalogTables tables = catalog.tables();
  tables.files = storage->files;
  tables.has_checksums = true;
  return Catalog(std::move(tables), std::move(storage));
}

std::filesystem::path DefaultCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "gpufs";
  }
  const char* home = std::getenv("HOME");
  return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "gpufs";
}

}  // namespace gpufs
