#include "dataset/open/open_dataset.h"

#include <fcntl.h>
#include <malloc.h>
#include <pwd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/file_io.h"
#include "base/private_files.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "dataset/format/mytar.h"
#include "dataset/format/name_rules.h"
#include "dataset/format/source_advice.h"
#include "dataset/format/tar.h"
#include "dataset/format/tree_shape.h"

namespace gpufs {
namespace {

struct timespec MtimeOf(const std::filesystem::path& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_mtim : timespec{};
}

// Each blob must be a regular file inside the dataset folder (no link out of it) with
// the size the index expects. Its modification time is recorded, so that the daemon can
// tell a blob that changes while mounted from the one it was given.
Status StampBlobFiles(Dataset& d) {
  const int dir_fd = open(d.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    return Fail(errno, "cannot open dataset folder {}: {}", d.dir.string(), strerror(errno));
  }
  Status result = Ok{};
  for (size_t b = 0; b < d.blobs.size() && result; ++b) {
    const std::string& name = d.catalog.blobs()[b];
    const std::filesystem::path path = d.dir / name;
    auto stat = StatBeneath(dir_fd, name);
    if (!stat) {
      result = Fail(stat.error().code, "cannot open blob {} (listed in {}): {}", path.string(),
                    d.index.string(), stat.error().message);
      continue;
    }
    const struct stat& st = *stat;
    if (!S_ISREG(st.st_mode)) {
      result = Fail(EINVAL, "cannot use blob {} (listed in {}): not a regular file", path.string(),
                    d.index.string());
    } else if (static_cast<uint64_t>(st.st_size) != d.blobs[b].size) {
      const bool shorter = static_cast<uint64_t>(st.st_size) < d.blobs[b].size;
      result = Fail(EINVAL, "cannot use blob {}: it is {} bytes but {} says {}; {}", path.string(),
                    st.st_size, d.index.string(), d.blobs[b].size,
                    shorter ? "it is truncated" : "it changed since the index was written");
    }
    d.blobs[b].mtime_ns = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
  }
  close(dir_fd);
  return result;
}

Dataset FromIndex(const std::filesystem::path& dir, OpenedIndex&& opened, const std::string& format,
                  const std::filesystem::path& index) {
  return Dataset{
      dir, std::move(opened.catalog), std::move(opened.info.blobs), format, index, MtimeOf(index),
      {}};
}

const FolderRole kIndexCacheRole{"index cache",
                                 "give each user a cache folder of their own (XDG_CACHE_HOME)"};

Result<Dataset> OpenNative(const std::filesystem::path& dir, const std::string& format) {
  const std::filesystem::path index = dir / kNativeIndexName;
  auto opened = OpenNativeIndex(index);
  if (!opened) return opened.error();
  return FromIndex(dir, std::move(*opened), format, index);
}

// The mytar folder's own index, when it may be trusted and describes metadata.txt as it is
// now.
std::optional<Result<Dataset>> OpenMytarIndex(const std::filesystem::path& dir,
                                              std::vector<std::string>& notes) {
  std::error_code ec;
  const std::filesystem::path index = dir / kNativeIndexName;
  if (!std::filesystem::exists(std::filesystem::symlink_status(index, ec))) return std::nullopt;
  auto opened = OpenIndexAt(BesideData(dir / kMytarIndexName, index), notes);
  if (!opened && opened.error().code == EPERM) return std::nullopt;  // untrusted: noted
  auto now = StampOf(dir / kMytarIndexName);
  if (!opened || !now || !(opened->info.source == *now)) {
    notes.push_back(fmt::format(
        "{} does not match {}; parsing the text instead (run `gpufsd "
        "index {}` to rebuild it)",
        (dir / kNativeIndexName).string(), (dir / kMytarIndexName).string(), dir.string()));
    return std::nullopt;
  }
  return FromIndex(dir, std::move(*opened), "mytar+index", index);
}

std::string IndexNameFor(const std::filesystem::path& archive) {
  return archive.filename().string() + ".gpufs-index";
}

// Where a tar archive's index may be: beside it, then in the private cache (when that
// folder can be used; else `notes` says why).
std::vector<IndexPlace> TarIndexPlaces(const std::filesystem::path& archive,
                                       const OpenOptions& options,
                                       std::vector<std::string>& notes) {
  std::vector<IndexPlace> places = {
      BesideData(archive, archive.parent_path() / IndexNameFor(archive))};
  if (options.cache_dir.empty()) return places;
  if (Status s = OpenCacheDir(options.cache_dir, notes); !s) {
    notes.push_back(s.error().message);
    return places;
  }
  places.push_back(IndexPlace{options.cache_dir /
                              fmt::format("{}-{:016x}.gpufs-index", archive.filename().string(),
                                          ChecksumOf(archive.c_str(), archive.native().size()))});
  return places;
}

Result<Dataset> OpenTar(const std::filesystem::path& archive, const OpenOptions& options) {
  auto stamp = StampOf(archive);
  if (!stamp) return stamp.error();
  std::vector<std::string> notes;
  const std::vector<IndexPlace> candidates = TarIndexPlaces(archive, options, notes);
  if (auto saved = OpenSavedTarIndex(archive, candidates, *stamp, notes)) {
    saved->mtime = MtimeOf(archive);
    saved->notes = std::move(notes);
    return std::move(*saved);
  }
  auto listing = ListTar(archive, options.progress);
  if (!listing) return listing.error();
  auto d = TarDataset(archive, *listing, *stamp, options.tar_group_bytes);
  if (!d) return d.error();
  d->mtime = MtimeOf(archive);
  d->notes.insert(d->notes.begin(), notes.begin(), notes.end());
  d->index = SaveTarIndex(*d, *stamp, candidates);
  return d;
}

}  // namespace

// An index in the private cache, opened beneath its folder's descriptor once that folder
// is checked again: the folder's name was checked when the mount began, but whoever owns a
// folder above it could have put another in its place since.
Result<OpenedIndex> OpenCachedIndex(const std::filesystem::path& path) {
  auto folder = OpenPrivateFolder(path.parent_path(), kIndexCacheRole);
  if (!folder) return folder.error();
  const int fd = openat(folder->fd.get(), path.filename().c_str(),
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP) {
    return Fail(ELOOP, "cannot open index {}: it is a symbolic link", path.string());
  }
  if (fd < 0) return Fail(errno, "cannot open index {}: {}", path.string(), strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Fail(EINVAL, "cannot open index {}: not a regular file", path.string());
  }
  return OpenNativeIndexFd(fd, path);
}

IndexPlace BesideData(const std::filesystem::path& data, const std::filesystem::path& index) {
  struct stat st {};
  const bool known = stat(data.c_str(), &st) == 0;
  // Written as readable as the data: an index shows every name the data holds.
  return IndexPlace{index, true, known ? st.st_uid : geteuid(),
                    known ? static_cast<mode_t>(st.st_mode & 0644) : mode_t{0600}};
}

Result<OpenedIndex> OpenIndexAt(const IndexPlace& place, std::vector<std::string>& notes) {
  if (!place.beside) return OpenCachedIndex(place.path);
  auto fd = OpenTrustedIndex(place.path, place.data_owner);
  if (!fd) {
    if (fd.error().code != EPERM) {
      return Fail(fd.error().code, "cannot open index {}: {}", place.path.string(),
                  fd.error().message);
    }
    notes.push_back(
        fmt::format("not using {}: {}; it could show other files or labels than "
                    "the data holds",
                    place.path.string(), fd.error().message));
    return Fail(EPERM, "cannot trust index {}: {}", place.path.string(), fd.error().message);
  }
  return OpenNativeIndexFd(fd->release(), place.path);
}

std::optional<Dataset> OpenSavedTarIndex(const std::filesystem::path& archive,
                                         const std::vector<IndexPlace>& candidates,
                                         const SourceStamp& stamp,
                                         std::vector<std::string>& notes) {
  std::error_code ec;
  for (const IndexPlace& place : candidates) {
    const std::filesystem::path& path = place.path;
    if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) continue;
    auto opened = OpenIndexAt(place, notes);
    if (!opened && opened.error().code == kOldIndexVersion) {
      notes.push_back(fmt::format("listing {} again: its index {} is of an older version",
                                  archive.string(), path.string()));
      continue;
    }
    if (!opened || !(opened->info.source == stamp) || opened->catalog.blobs().size() != 1 ||
        opened->catalog.blobs()[0] != archive.filename().string()) {
      continue;  // stale or foreign: it will be rebuilt over
    }
    if (!opened->info.tar_listed_as_extracted) {
      notes.push_back(fmt::format("listing {} again: its index {} was made by an older reader",
                                  archive.string(), path.string()));
      continue;
    }
    return Dataset{archive.parent_path(),
                   std::move(opened->catalog),
                   std::move(opened->info.blobs),
                   "tar",
                   path,
                   {},
                   {}};
  }
  return std::nullopt;
}

std::filesystem::path SaveTarIndex(Dataset& d, const SourceStamp& stamp,
                                   const std::vector<IndexPlace>& candidates) {
  IndexInfo info;
  info.source = stamp;
  info.blobs = d.blobs;
  info.tar_listed_as_extracted = true;
  std::string failures;
  for (const IndexPlace& place : candidates) {
    const FileAccess access = place.beside ? FileAccess::Shared(place.mode) : FileAccess::Private();
    Status s = WriteNativeIndex(d.catalog, info, place.path, access);
    if (s) return place.path;
    failures += (failures.empty() ? "" : "; ") + s.error().message;
  }
  d.notes.push_back(
      fmt::format("the archive's index could not be saved, so the next mount "
                  "reads the archive again ({})",
                  failures));
  return {};
}

Result<Dataset> TarDataset(const std::filesystem::path& archive, TarListing& listing,
                           const SourceStamp& stamp, uint64_t group_bytes) {
  std::vector<std::string_view> paths;
  paths.reserve(listing.entries.size());
  for (const TarEntry& e : listing.entries) paths.push_back(e.path);
  auto shape = ShapeTreeOfViews(paths, SplitMode::kAuto, true, archive.string());
  if (!shape) return shape.error();
  std::vector<std::string_view>().swap(paths);
  auto catalog = TarCatalog(archive, listing, *shape, group_bytes);
  if (!catalog) return catalog.error();
  Dataset d{
      archive.parent_path(), std::move(*catalog), {BlobInfo{stamp.size, 0}}, "tar", {}, {}, {}};
  if (listing.skipped) {
    d.notes.push_back(
        fmt::format("{} symbolic links, devices or fifos (or hard links to them) in the archive "
                    "have no bytes to serve and are not shown",
                    listing.skipped));
  }
  if (listing.replaced) {
    d.notes.push_back(
        fmt::format("{} members of the archive are replaced by a later member of the same path "
                    "and are not shown: extracting the archive keeps the last",
                    listing.replaced));
  }
  if (!shape->stripped.empty()) {
    d.notes.push_back(
        fmt::format("all files of the archive lie in the folder {}, which is looked "
                    "through: what it holds is shown at the top",
                    Printable(shape->stripped)));
  }
  if (!shape->outside.empty()) {
    d.notes.push_back(fmt::format("{} files outside class folders are not shown (first: {})",
                                  shape->outside.size(), shape->outside.front()));
  }
  return d;
}

Result<Dataset> OpenMytarText(const std::filesystem::path& dir) {
  auto spec = ReadMytarDataset(dir);
  if (!spec) return spec.error();
  auto catalog = CatalogFromSpec(*spec);
  if (!catalog) return catalog.error();
  Dataset d{dir, std::move(*catalog), {}, "mytar", spec->index_file, MtimeOf(spec->index_file), {}};
  for (const GroupSpec& g : spec->groups) d.blobs.push_back(BlobInfo{g.offset + g.size, 0});
  return d;
}

namespace {

// Hands the whole pages of [begin, end) back to the kernel: memory still allocated but
// never read again, which reads as zeros if it is. The pages stay inside the range, clear
// of the allocator's own words around it.
void ReleasePages(const void* begin, const void* end) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t from = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t to = reinterpret_cast<uintptr_t>(end) / page * page;
  if (from < to) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

constexpr size_t kReleaseEvery = 1u << 20;  // files fed

}  // namespace

Result<Catalog> TarCatalog(const std::filesystem::path& archive, TarListing& listing,
                           TreeShape& shape, uint64_t group_bytes) {
  CatalogBuilder builder(archive.string(), false, false);
  builder.SetClasses(std::move(shape.classes));
  // Every class folder holds a file, which makes it: adding the folders apart would put
  // them before the files and the paths out of the archive's order, which the builder
  // sorts much faster when it is already the paths' order.
  const std::vector<TarEntry>& entries = listing.entries;
  std::vector<uint32_t> by_offset;
  by_offset.reserve(entries.size());
  for (uint32_t i = 0; i < entries.size(); ++i) {
    if (shape.file_classes[i] != kOutsideClasses) by_offset.push_back(i);
  }
  // Already in order but for hard links, which point back.
  const bool in_order =
      std::is_sorted(by_offset.begin(), by_offset.end(),
                     [&](uint32_t a, uint32_t b) { return entries[a].offset < entries[b].offset; });
  if (!in_order) {
    std::stable_sort(by_offset.begin(), by_offset.end(),
                     [&](uint32_t a, uint32_t b) { return entries[a].offset < entries[b].offset; });
  }
  // The builder reads the paths where the listing keeps them, and frees them.
  builder.AdoptPaths(std::move(listing.paths));
  builder.Reserve(by_offset.size(), 0);
  const std::string blob = archive.filename().string();
  uint64_t group_start = 0;
  size_t released = 0;    // entries handed back, when they are fed in order
  size_t released_n = 0;  // of by_offset
  for (size_t n = 0; n < by_offset.size(); ++n) {
    const uint32_t i = by_offset[n];
    const TarEntry& e = entries[i];
    // The entries fed go as the builder's tables grow, so that both are not held whole at
    // once (32 and 36 bytes a file).
    if (in_order && i - released >= kReleaseEvery) {
      ReleasePages(entries.data() + released, entries.data() + i);
      ReleasePages(shape.file_classes.data() + released, shape.file_classes.data() + i);
      ReleasePages(by_offset.data() + released_n, by_offset.data() + n);
      released = i;
      released_n = n;
    }
    if (builder.group_count() == 0 || e.offset + e.size - group_start > group_bytes) {
      group_start = e.offset;
      builder.AddGroup(blob, e.offset, 0);
    }
    const MemberRecord member{
        shape.file_classes[i], builder.group_count() - 1, e.offset, e.size, 0, i + 1};
    const std::string_view tree_path = e.path.substr(shape.stripped.size());
    if (Status s = builder.AddFile(tree_path, member, nullptr); !s) return s.error();
  }
  // What the builder no longer needs goes before it builds.
  std::vector<uint32_t>().swap(by_offset);
  std::vector<uint32_t>().swap(shape.file_classes);
  std::vector<TarEntry>().swap(listing.entries);
  malloc_trim(0);
  return std::move(builder).Build();
}

Catalog WithFileChecksums(const Catalog& catalog, const std::vector<uint64_t>& checksums,
                          std::vector<Sha256Digest> sha256) {
  struct Storage {
    Catalog base;  // keeps every other table alive
    std::vector<uint64_t> checksums;
    std::vector<Sha256Digest> sha256;
  };
  auto storage = std::make_shared<Storage>(Storage{catalog, checksums, std::move(sha256)});
  CatalogTables tables = catalog.tables();
  tables.checksums = storage->checksums;
  tables.sha256 = storage->sha256;
  return Catalog(std::move(tables), std::move(storage));
}

std::filesystem::path DefaultCacheDir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "gpufs";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".cache" / "gpufs";
  }
  // No HOME (a daemon started by slurmd or a system unit): the user's home from the
  // password database rather than /tmp, where any user could make .cache/gpufs first and
  // so refuse the folder to this one.
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> text(16384);
  std::error_code ec;
  if (getpwuid_r(geteuid(), &entry, text.data(), text.size(), &found) == 0 && found &&
      found->pw_dir && *found->pw_dir && std::filesystem::is_directory(found->pw_dir, ec)) {
    return std::filesystem::path(found->pw_dir) / ".cache" / "gpufs";
  }
  return std::filesystem::path("/tmp") / ".cache" / "gpufs";
}

Status OpenCacheDir(const std::filesystem::path& dir, std::vector<std::string>& notes) {
  auto folder = OpenPrivateFolder(dir, kIndexCacheRole);
  if (!folder) return folder.error();
  if (!folder->note.empty()) notes.push_back(folder->note);
  return Ok{};
}

namespace {

Result<Dataset> OpenAnyFormat(const std::filesystem::path& src_in, const OpenOptions& options) {
  const std::filesystem::path src = std::filesystem::absolute(src_in).lexically_normal();
  std::error_code ec;
  if (std::filesystem::is_regular_file(src, ec)) {
    // The archive is the blob, opened beneath its folder: that of the file, not of a link.
    if (LooksLikeTar(src)) return OpenTar(std::filesystem::canonical(src, ec), options);
    return Fail(EINVAL,
                "cannot open dataset {}: not a folder nor an uncompressed tar archive "
                "(decompress .tar.gz and the like first)",
                src.string());
  }
  if (std::filesystem::exists(src / kNativeIndexName, ec) &&
      !std::filesystem::is_regular_file(src / kNativeIndexName, ec)) {
    return Fail(EINVAL, "cannot open dataset {}: {} is not a regular file", src.string(),
                (src / kNativeIndexName).string());
  }
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

}  // namespace

Result<Dataset> OpenDataset(const std::filesystem::path& src, const OpenOptions& options) {
  std::error_code ec;
  if (HasUrlScheme(src.string()) && !std::filesystem::exists(src, ec)) {
    return Fail(EINVAL, "cannot open dataset {}: {}", src.string(), UrlAdvice(src.string()));
  }
  auto d = OpenAnyFormat(src, options);
  if (!d && d.error().code == ENOENT && std::filesystem::is_directory(src, ec)) {
    const std::string advice = TreeAdvice(std::filesystem::absolute(src).lexically_normal());
    if (!advice.empty()) {
      return Fail(ENOENT, "cannot open dataset {}: {}", src.string(), advice);
    }
  }
  if (d) {
    if (Status s = StampBlobFiles(*d); !s) return s.error();
  }
  return d;
}

}  // namespace gpufs
