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
#include "dataset/open/open_archive.h"

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
  return Dataset{dir,
                 std::move(opened.catalog),
                 std::move(opened.info.blobs),
                 format,
                 index,
                 MtimeOf(index),
                 {},
                 {}};
}

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

Result<Dataset> OpenTar(const std::filesystem::path& archive, ArchiveKind kind,
                        const OpenOptions& options) {
  auto stamp = StampOf(archive);
  if (!stamp) return stamp.error();
  std::vector<std::string> notes;
  const std::vector<IndexPlace> candidates = TarIndexPlaces(archive, options, notes);
  if (auto saved = OpenSavedTarIndex(archive, candidates, *stamp, notes)) {
    saved->mtime = MtimeOf(archive);
    saved->notes = std::move(notes);
    return std::move(*saved);
  }
  auto reader = OpenFileReader(archive);
  if (!reader) return reader.error();
  auto d = ListArchive(**reader, kind, archive, *stamp, options, {}, 1, kLocalTarChunk);
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
    Dataset d{archive.parent_path(),
              std::move(opened->catalog),
              std::move(opened->info.blobs),
              "tar",
              path,
              {},
              {},
              {}};
    if (opened->info.decoded) {
      auto plans = LoadPlans(d.catalog, place, stamp);
      if (!plans || plans->size() != 1) {
        notes.push_back(
            fmt::format("listing {} again: {}", archive.string(),
                        plans ? "its index has no decode plan" : plans.error().message));
        continue;
      }
      d.plans = std::move(*plans);
      d.format = d.plans[0].kind == DecodeKind::kZip ? "zip" : "tar.gz";
      d.blobs[0].size = stamp.size;  // the index gives the decoded space's
    }
    return d;
  }
  return std::nullopt;
}

std::filesystem::path SaveTarIndex(Dataset& d, const SourceStamp& stamp,
                                   const std::vector<IndexPlace>& candidates) {
  IndexInfo info;
  info.source = stamp;
  info.blobs = d.blobs;
  info.tar_listed_as_extracted = true;
  info.decoded = !d.plans.empty();
  // A decoded blob's groups lie in its decoded space, which the index checks them against.
  for (const DecodePlan& plan : d.plans) info.blobs.at(plan.blob).size = plan.decoded_size;
  std::string failures;
  for (const IndexPlace& place : candidates) {
    const FileAccess access = place.beside ? FileAccess::Shared(place.mode) : FileAccess::Private();
    // The plans first: an index that says it has them is not used without them.
    Status s = info.decoded ? SavePlans(d.plans, d.catalog, place, stamp) : Status(Ok{});
    if (s) s = WriteNativeIndex(d.catalog, info, place.path, access);
    if (s) return place.path;
    failures += (failures.empty() ? "" : "; ") + s.error().message;
  }
  d.notes.push_back(
      fmt::format("the archive's index could not be saved, so the next mount "
                  "reads the archive again ({})",
                  failures));
  return {};
}

Result<Dataset> OpenMytarText(const std::filesystem::path& dir) {
  auto spec = ReadMytarDataset(dir);
  if (!spec) return spec.error();
  auto catalog = CatalogFromSpec(*spec);
  if (!catalog) return catalog.error();
  Dataset d{dir, std::move(*catalog), {}, "mytar", spec->index_file, MtimeOf(spec->index_file), {},
            {}};
  for (const GroupSpec& g : spec->groups) d.blobs.push_back(BlobInfo{g.offset + g.size, 0});
  return d;
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
    auto reader = OpenFileReader(src);
    if (!reader) return reader.error();
    const ArchiveKind kind = SniffArchive(**reader);
    if (kind == ArchiveKind::kTar || kind == ArchiveKind::kZip || kind == ArchiveKind::kGzip) {
      return OpenTar(std::filesystem::canonical(src, ec), kind, options);
    }
    return NotServed(src.string(), kind);
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
