#include "dataset/format/native_index.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <type_traits>

#include "base/file_io.h"
#include "base/private_files.h"
#include "dataset/format/checksums.h"
#include "dataset/format/name_rules.h"
#include "dataset/format/native_layout.h"

namespace gpufs {
namespace {

using namespace native_layout;

struct Mapping {
  void* address = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (address != MAP_FAILED) munmap(address, size);
  }
  const char* bytes() const { return static_cast<const char*>(address); }
};

class IndexChecker {
 public:
  IndexChecker(const std::filesystem::path& path, const char* base, size_t size)
      : path_(path.string()), base_(base), size_(size) {}

  Result<Header> CheckHeader() {
    constexpr size_t kVersionEnd = sizeof(kMagic) + sizeof(uint32_t);
    if (size_ < kVersionEnd) return Bad("the file is {} bytes, shorter than a header", size_);
    if (std::memcmp(base_, kMagic, sizeof(kMagic)) != 0) return Bad("not a gpufs index");
    uint32_t version = 0;
    std::memcpy(&version, base_ + sizeof(kMagic), sizeof(version));
    if (version < kNativeIndexVersion) {
      return Error{kOldIndexVersion,
                   Message("it is index version {}, written by an older gpufsd, and this one "
                           "reads version {}: run `gpufsd pack` again to rewrite a pack, or "
                           "`gpufsd index` for a mytar folder (a tar's saved index is rebuilt "
                           "on its own)",
                           version, kNativeIndexVersion)};
    }
    if (version > kNativeIndexVersion) {
      return Bad("index version {} is newer than this gpufsd reads ({}); upgrade gpufsd", version,
                 kNativeIndexVersion);
    }
    if (size_ < sizeof(Header)) return Bad("the file is {} bytes, shorter than a header", size_);
    Header h;
    std::memcpy(&h, base_, sizeof(h));
    if (h.header_size != sizeof(Header)) return Bad("header size {} is wrong", h.header_size);
    if (HeaderChecksum(h) != h.header_checksum) return Bad("header checksum mismatch");
    if (h.file_size != size_) {
      return Bad("the file is {} bytes but its header says {}: truncated or extended", size_,
                 h.file_size);
    }
    for (int i = 0; i < kSectionCount; ++i) {
      const Section& s = h.sections[i];
      if (s.offset % 8 != 0 || s.offset < h.header_size || s.offset > size_ ||
          s.count > (size_ - s.offset) / kRecordSize[i]) {
        return Bad("section {} lies outside the file", i);
      }
    }
    if (ChecksumOf(base_ + h.header_size, size_ - h.header_size) != h.body_checksum) {
      return Bad("body checksum mismatch: the index is damaged");
    }
    return CheckCounts(h);
  }

  // The per-file sections are indexed alike: each has a record per file, or none.
  Result<Header> CheckCounts(const Header& h) {
    const uint64_t files = h.sections[kExtents].count;
    if (h.sections[kFileNames].count != files + 1) {
      return Bad("{} name offsets for {} files", h.sections[kFileNames].count, files);
    }
    const uint64_t classes = h.sections[kFileClasses].count;
    if (classes != 0 && classes != files)
      return Bad("{} file classes for {} files", classes, files);
    const uint64_t checksums = (h.flags & kHasChecksums) ? files : 0;
    if (h.sections[kChecksums].count != checksums) {
      return Bad("{} checksums for {} files", h.sections[kChecksums].count, checksums);
    }
    const uint64_t digests = (h.flags & kHasSha256) ? files : 0;
    if (h.sections[kSha256].count != digests) {
      return Bad("{} SHA-256 digests for {} files", h.sections[kSha256].count, digests);
    }
    if (h.sections[kDirs].count == 0) return Bad("the root is missing");
    if (h.sections[kDirs].count + files > UINT32_MAX) {
      return Bad("{} nodes are more than a catalog can number", h.sections[kDirs].count + files);
    }
    return h;
  }

  template <typename T>
  std::span<const T> View(const Header& h, SectionId id) const {
    const Section& s = h.sections[id];
    return {reinterpret_cast<const T*>(base_ + s.offset), static_cast<size_t>(s.count)};
  }

  // Every class and blob name must lie in the name table and be one path segment: a blob
  // name is opened beneath the dataset folder, so "/etc/shadow", "../x" or "" must never
  // reach that far.
  Status CheckNames(std::string_view names, std::span<const StrRef> refs, const char* what) {
    for (size_t i = 0; i < refs.size(); ++i) {
      const StrRef& r = refs[i];
      if (r.offset > names.size() || r.size > names.size() - r.offset) {
        return Bad("{} name #{} lies outside the name table", what, i);
      }
      const std::string_view name = names.substr(r.offset, r.size);
      if (std::string_view why = NameProblem(name); !why.empty()) {
        return Bad("{} name #{} '{}' is invalid ({})", what, i, Printable(name), why);
      }
    }
    return Ok{};
  }

  Status CheckGroups(std::span<const GroupExtent> groups, std::span<const BlobRecord> blobs) {
    for (size_t i = 0; i < groups.size(); ++i) {
      const GroupExtent& g = groups[i];
      if (g.blob >= blobs.size())
        return Bad("group {} names blob #{} of {}", i, g.blob, blobs.size());
      if (g.offset > blobs[g.blob].size || g.size > blobs[g.blob].size - g.offset) {
        return Bad("group {} lies beyond the end of its blob", i);
      }
    }
    return Ok{};
  }

  // The tree must be one a lookup can walk: the root is its own parent (a listing of the
  // root stats its '..'); every other folder sits in exactly the subfolder run of its
  // parent, which comes before it; the file runs follow the folders' order and cover the
  // file table once; each run is strictly name-sorted (so the binary searches of
  // Catalog::Find find what a listing shows), no name is both a file and a folder of one
  // folder, and every name is one path segment. Together these make every node reachable
  // from the root, once.
  Status CheckDirs(const CatalogTables& t) {
    const size_t n = t.dirs.size();
    for (size_t id = 0; id < n; ++id) {  // names first: the runs below compare them
      const CatalogDir& d = t.dirs[id];
      if (!Within(t.names, d.name_offset, d.name_size) ||
          !Within(t.names, d.prefix_offset, d.prefix_size)) {
        return Bad("folder {} has its name outside the name table", id);
      }
      const std::string_view name = t.names.substr(d.name_offset, d.name_size);
      if (std::string_view why = NameProblem(name); id > 0 && !why.empty()) {
        return Bad("folder {} is named '{}', which is invalid ({})", id, Printable(name), why);
      }
    }
    if (t.dirs[0].parent != 0) {
      return Bad("the root names folder {} as its parent, where it must be its own",
                 t.dirs[0].parent);
    }
    uint64_t next_file = 0;
    for (size_t id = 0; id < n; ++id) {
      const CatalogDir& d = t.dirs[id];
      if (id > 0 && (d.parent >= id || id < t.dirs[d.parent].first_dir ||
                     id - t.dirs[d.parent].first_dir >= t.dirs[d.parent].dir_count)) {
        return Bad("folder {} is not among the subfolders of its folder {}", id, d.parent);
      }
      if (d.dir_count > 0 &&
          (d.first_dir <= id || d.first_dir > n || d.dir_count > n - d.first_dir)) {
        return Bad("folder {} has subfolders outside the folder table", id);
      }
      if (d.first_file != next_file || d.file_count > t.file_count() - next_file) {
        return Bad("folder {} has files outside its run of the file table", id);
      }
      next_file += d.file_count;
      if (d.file_count > 0 && t.file_classes.empty() && d.class_id >= t.classes.size()) {
        return Bad("folder {} names a missing class", id);
      }
      if (Status s = CheckSubdirs(t, static_cast<uint32_t>(id)); !s) return s;
      if (Status s = CheckFileNames(t, d, id); !s) return s;
    }
    if (next_file != t.file_count()) return Bad("a file record belongs to no folder");
    return Ok{};
  }

  Status CheckFiles(const CatalogTables& t) {
    for (size_t i = 0; i < t.extents.size(); ++i) {
      const PackedExtent& e = t.extents[i];
      if (e.group >= t.groups.size()) return Bad("file record {} names a missing group", i);
      if (!t.file_classes.empty() && t.file_classes[i] >= t.classes.size()) {
        return Bad("file record {} names a missing class", i);
      }
      if (e.size == kWideExtent && e.offset >= t.wide.size()) {
        return Bad("file record {} names a missing wide extent", i);
      }
      const WideExtent w = e.size == kWideExtent ? t.wide[e.offset] : WideExtent{e.offset, e.size};
      const GroupExtent& g = t.groups[e.group];
      if (w.offset > g.size || w.size > g.size - w.offset) {
        return Bad("file record {} lies outside its group", i);
      }
    }
    return Ok{};
  }

 private:
  static bool Within(std::string_view names, uint32_t offset, uint32_t size) {
    return offset <= names.size() && size <= names.size() - offset;
  }

  Status CheckSubdirs(const CatalogTables& t, uint32_t id) {
    const CatalogDir& d = t.dirs[id];
    for (uint32_t c = d.first_dir; c < d.first_dir + d.dir_count; ++c) {
      if (t.dirs[c].parent != id) return Bad("folder {} is listed under the wrong folder", c);
      if (c > d.first_dir && !(NameOf(t, c - 1) < NameOf(t, c))) {
        return Bad("the subfolders of folder {} are not sorted and unique: '{}' comes after '{}'",
                   id, Printable(NameOf(t, c)), Printable(NameOf(t, c - 1)));
      }
    }
    return Ok{};
  }

  // Suffixes lie back to back, each a valid name once its folder's prefix is put before it.
  Status CheckFileNames(const CatalogTables& t, const CatalogDir& d, size_t id) {
    const std::string_view prefix = t.names.substr(d.prefix_offset, d.prefix_size);
    constexpr std::string_view kBad("/\0\n", 3);
    if (d.file_count > 0 && prefix.find_first_of(kBad) != std::string_view::npos) {
      return Bad("folder {} has the file name prefix '{}', which is invalid ({})", id,
                 Printable(prefix), NameProblem(prefix));
    }
    std::string_view previous;
    for (uint32_t i = d.first_file; i < d.first_file + d.file_count; ++i) {
      const uint32_t from = t.file_names[i];
      const uint32_t to = t.file_names[i + 1];
      if (from > to || to > t.names.size())
        return Bad("file {} has its name outside the name table", i);
      const std::string_view suffix = t.names.substr(from, to - from);
      const size_t size = prefix.size() + suffix.size();
      if (size <= 2 || size > kNameMax || suffix.find_first_of(kBad) != std::string_view::npos) {
        const std::string name = std::string(prefix).append(suffix);
        if (std::string_view why = NameProblem(name); !why.empty()) {
          return Bad("file {} is named '{}', which is invalid ({})", i, Printable(name), why);
        }
      }
      if (i > d.first_file && !(previous < suffix)) {
        return Bad("the files of folder {} are not sorted and unique: '{}{}' comes after '{}{}'",
                   id, Printable(prefix), Printable(suffix), Printable(prefix),
                   Printable(previous));
      }
      previous = suffix;
    }
    return CheckNoFileIsAFolder(t, d, prefix, id);
  }

  // A name both a subfolder and a file of one folder would be listed twice and looked up once.
  Status CheckNoFileIsAFolder(const CatalogTables& t, const CatalogDir& d, std::string_view prefix,
                              size_t id) {
    if (d.file_count == 0) return Ok{};
    for (uint32_t c = d.first_dir; c < d.first_dir + d.dir_count; ++c) {
      const std::string_view name = NameOf(t, c);
      if (!name.starts_with(prefix)) continue;
      const std::string_view suffix = name.substr(prefix.size());
      uint32_t lo = d.first_file;
      uint32_t hi = d.first_file + d.file_count;
      while (lo < hi) {  // the run is sorted: checked before
        const uint32_t mid = lo + (hi - lo) / 2;
        const int cmp = t.names.substr(t.file_names[mid], t.file_names[mid + 1] - t.file_names[mid])
                            .compare(suffix);
        if (cmp == 0) {
          return Bad("folder {} holds '{}' both as a file and as a folder", id, Printable(name));
        }
        if (cmp < 0) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
    }
    return Ok{};
  }

  // Names are bounds-checked before any run is compared.
  static std::string_view NameOf(const CatalogTables& t, uint32_t id) {
    return t.names.substr(t.dirs[id].name_offset, t.dirs[id].name_size);
  }

  template <typename... Args>
  std::string Message(fmt::format_string<Args...> format, Args&&... args) {
    return fmt::format("cannot use index {}: {}", path_,
                       fmt::format(format, std::forward<Args>(args)...));
  }

  template <typename... Args>
  Error Bad(fmt::format_string<Args...> format, Args&&... args) {
    return Error{EINVAL, Message(format, std::forward<Args>(args)...)};
  }

  std::string path_;
  const char* base_;
  size_t size_;
};

std::vector<std::string> Strings(std::string_view names, std::span<const StrRef> refs) {
  std::vector<std::string> out;
  out.reserve(refs.size());
  for (const StrRef& r : refs) out.emplace_back(names.substr(r.offset, r.size));
  return out;
}

}  // namespace

Result<OpenedIndex> OpenNativeIndex(const std::filesystem::path& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP) {
    return Fail(ELOOP, "cannot open index {}: it is a symbolic link", path.string());
  }
  if (fd < 0) return Fail(errno, "cannot open index {}: {}", path.string(), strerror(errno));
  return OpenNativeIndexFd(fd, path);
}

Result<OpenedIndex> OpenNativeIndexFd(int fd, const std::filesystem::path& path) {
  struct stat st {};
  auto mapping = std::make_shared<Mapping>();
  if (fstat(fd, &st) == 0 && st.st_size > 0) {
    mapping->size = static_cast<size_t>(st.st_size);
    mapping->address = mmap(nullptr, mapping->size, PROT_READ, MAP_SHARED, fd, 0);
  }
  const int err = errno;
  close(fd);
  if (mapping->address == MAP_FAILED) {
    if (st.st_size == 0)
      return Fail(EINVAL, "cannot use index {}: the file is empty", path.string());
    return Fail(err, "cannot map index {}: {}", path.string(), strerror(err));
  }
  madvise(mapping->address, mapping->size, MADV_WILLNEED);
  IndexChecker check(path, mapping->bytes(), mapping->size);
  auto header = check.CheckHeader();
  if (!header) return header.error();
  const Header& h = *header;
  CatalogTables t;
  t.names =
      std::string_view(mapping->bytes() + h.sections[kNames].offset, h.sections[kNames].count);
  const auto classes = check.View<StrRef>(h, kClasses);
  const auto blobs = check.View<BlobRecord>(h, kBlobs);
  t.groups = check.View<GroupExtent>(h, kGroups);
  t.dirs = check.View<CatalogDir>(h, kDirs);
  t.file_names = check.View<uint32_t>(h, kFileNames);
  t.extents = check.View<PackedExtent>(h, kExtents);
  t.wide = check.View<WideExtent>(h, kWide);
  t.file_classes = check.View<uint32_t>(h, kFileClasses);
  t.checksums = check.View<uint64_t>(h, kChecksums);
  t.sha256 = check.View<Sha256Digest>(h, kSha256);
  std::vector<StrRef> blob_names;
  for (const BlobRecord& b : blobs) blob_names.push_back(b.name);
  if (Status s = check.CheckNames(t.names, classes, "class"); !s) return s.error();
  if (Status s = check.CheckNames(t.names, blob_names, "blob"); !s) return s.error();
  if (Status s = check.CheckGroups(t.groups, blobs); !s) return s.error();
  t.classes = Strings(t.names, classes);
  t.blobs = Strings(t.names, blob_names);
  if (Status s = check.CheckDirs(t); !s) return s.error();
  if (Status s = check.CheckFiles(t); !s) return s.error();
  IndexInfo info;
  info.source = SourceStamp{h.source_size, h.source_mtime_ns};
  info.alignment = h.alignment;
  info.tar_listed_as_extracted = (h.flags & kTarListedAsExtracted) != 0;
  info.decoded = (h.flags & kDecodePlans) != 0;
  for (const BlobRecord& b : blobs) info.blobs.push_back(BlobInfo{b.size, b.checksum});
  return OpenedIndex{Catalog(std::move(t), std::move(mapping)), std::move(info)};
}

Result<SourceStamp> StampOf(const std::filesystem::path& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return Fail(errno, "cannot stat {}: {}", path.string(), strerror(errno));
  }
  return SourceStamp{static_cast<uint64_t>(st.st_size),
                     st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec};
}

}  // namespace gpufs
