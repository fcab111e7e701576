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

#include "dataset/format/file_io.h"
#include "dataset/format/name_rules.h"

namespace gpufs {
namespace {

static_assert(std::endian::native == std::endian::little, "the index is little-endian");

constexpr char kMagic[8] = {'G', 'P', 'U', 'F', 'S', 'I', 'D', 'X'};
constexpr uint32_t kHasChecksums = 1;
constexpr uint32_t kHasSha256 = 2;
// A tar's listing made as GNU tar extracts the archive (long link targets, v7 folders, the
// last member of a path): an older listing of an unchanged archive may differ, so it is
// made again.
constexpr uint32_t kTarListedAsExtracted = 4;

struct Section {
  uint64_t offset = 0;
  uint64_t count = 0;
};

enum SectionId { kNames, kClasses, kBlobs, kGroups, kNodes, kFiles, kSha256, kSectionCount };

// Version 1 has every section but kSha256; version 2 has them all.
template <int kSections>
struct HeaderOf {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint64_t file_size;
  uint64_t body_checksum;
  uint32_t flags;
  uint32_t alignment;
  uint64_t source_size;
  int64_t source_mtime_ns;
  Section sections[kSections];
  uint64_t header_checksum;  // XXH3-64 of the header with this field zero
};
using HeaderV1 = HeaderOf<kSha256>;
using Header = HeaderOf<kSectionCount>;  // what the reader works with, whatever the version
static_assert(sizeof(HeaderV1) == 160);
static_assert(sizeof(Header) == 176);

struct StrRef {
  uint32_t offset;
  uint32_t size;
};

struct BlobRecord {
  StrRef name;
  uint64_t size;
  uint64_t checksum;
};
static_assert(sizeof(BlobRecord) == 24);

constexpr std::array<size_t, kSectionCount> kRecordSize = {1,
                                                           sizeof(StrRef),
                                                           sizeof(BlobRecord),
                                                           sizeof(GroupExtent),
                                                           sizeof(CatalogNode),
                                                           sizeof(FileExtent),
                                                           sizeof(Sha256Digest)};

uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

template <typename H>
uint64_t HeaderChecksum(H header) {
  header.header_checksum = 0;
  return XXH3_64bits(&header, sizeof(header));
}

// Every field but the sections and the header's own checksum.
template <typename To, typename From>
void CopyFields(To& to, const From& from) {
  std::memcpy(to.magic, from.magic, sizeof(to.magic));
  to.version = from.version;
  to.header_size = from.header_size;
  to.file_size = from.file_size;
  to.body_checksum = from.body_checksum;
  to.flags = from.flags;
  to.alignment = from.alignment;
  to.source_size = from.source_size;
  to.source_mtime_ns = from.source_mtime_ns;
}

// A version 1 header as the reader's: no digests.
Header FromV1(const HeaderV1& v1) {
  Header h{};
  CopyFields(h, v1);
  std::copy(std::begin(v1.sections), std::end(v1.sections), h.sections);
  h.sections[kSha256] = Section{sizeof(HeaderV1), 0};
  h.flags &= ~kHasSha256;
  return h;
}

// The header as `version` writes it, its checksum set, as bytes.
std::string HeaderBytes(Header h, uint32_t version) {
  h.version = version;
  if (version >= 2) {
    h.header_size = sizeof(Header);
    h.header_checksum = HeaderChecksum(h);
    return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
  }
  HeaderV1 v1{};
  CopyFields(v1, h);
  std::copy(h.sections, h.sections + kSha256, v1.sections);
  v1.header_size = sizeof(HeaderV1);
  v1.header_checksum = HeaderChecksum(v1);
  return std::string(reinterpret_cast<const char*>(&v1), sizeof(v1));
}

// The bytes of an index, section by section, before they are written.
struct IndexImage {
  std::string names;
  std::vector<StrRef> classes;
  std::vector<BlobRecord> blobs;

  StrRef AddName(std::string_view name) {
    StrRef ref{static_cast<uint32_t>(names.size()), static_cast<uint32_t>(name.size())};
    names += name;
    return ref;
  }
};

// A read-only mapping of the whole index file, unmapped with the last Catalog using it.
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
    if (size_ < sizeof(HeaderV1)) return Bad("the file is {} bytes, shorter than a header", size_);
    if (std::memcmp(base_, kMagic, sizeof(kMagic)) != 0) return Bad("not a gpufs index");
    uint32_t version = 0;
    std::memcpy(&version, base_ + sizeof(kMagic), sizeof(version));
    if (version < 1 || version > kNativeIndexVersion) {
      return Bad(
          "index version {} is not supported (this gpufsd reads versions 1 to {}); rebuild it",
          version, kNativeIndexVersion);
    }
    auto header = version == 1 ? ReadHeader<HeaderV1>() : ReadHeader<Header>();
    if (!header) return header;
    Header& h = *header;
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
    if (XXH3_64bits(base_ + h.header_size, size_ - h.header_size) != h.body_checksum) {
      return Bad("body checksum mismatch: the index is damaged");
    }
    const uint64_t digests = (h.flags & kHasSha256) ? h.sections[kFiles].count : 0;
    if (h.sections[kSha256].count != digests) {
      return Bad("{} SHA-256 digests for {} files", h.sections[kSha256].count, digests);
    }
    return h;
  }

  // The header of its version, as the reader's; refused when its size or checksum is off.
  template <typename H>
  Result<Header> ReadHeader() {
    if (size_ < sizeof(H)) return Bad("the file is {} bytes, shorter than a header", size_);
    H h;
    std::memcpy(&h, base_, sizeof(h));
    if (h.header_size != sizeof(H)) return Bad("header size {} is wrong", h.header_size);
    if (HeaderChecksum(h) != h.header_checksum) return Bad("header checksum mismatch");
    if constexpr (std::is_same_v<H, HeaderV1>) {
      return FromV1(h);
    } else {
      return h;
    }
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

  // The tree must be one a lookup can walk: every node but the root sits in exactly the
  // child run of its parent, which comes before it; each run is strictly name-sorted (so
  // the binary search of Catalog::Find finds what a listing shows) and every name is one
  // path segment. Together these make every node reachable from the root, once.
  Status CheckNodes(const CatalogTables& t) {
    const size_t n = t.nodes.size();
    if (n == 0 || !t.nodes[0].is_dir) return Bad("the root is missing");
    if (n > UINT32_MAX) return Bad("{} nodes are more than a catalog can number", n);
    std::vector<bool> named(t.files.size());  // each file record belongs to one node
    for (size_t id = 0; id < n; ++id) {
      const CatalogNode& node = t.nodes[id];
      if (node.name_offset > t.names.size() || node.name_size > t.names.size() - node.name_offset) {
        return Bad("node {} has its name outside the name table", id);
      }
      const std::string_view name = t.names.substr(node.name_offset, node.name_size);
      if (id > 0) {
        if (std::string_view why = NameProblem(name); !why.empty()) {
          return Bad("node {} is named '{}', which is invalid ({})", id, Printable(name), why);
        }
        if (node.parent >= id || !t.nodes[node.parent].is_dir) {
          return Bad("node {} has parent {}, which is not a folder before it", id, node.parent);
        }
        const CatalogNode& parent = t.nodes[node.parent];
        if (id < parent.first || id - parent.first >= parent.count) {
          return Bad("node {} is not among the children of its folder {}", id, node.parent);
        }
      }
      if (node.is_dir > 1)
        return Bad("node {} has kind {}, neither file nor folder", id, node.is_dir);
      if (Status s =
              node.is_dir ? CheckChildren(t, static_cast<uint32_t>(id)) : CheckFile(t, id, named);
          !s) {
        return s;
      }
    }
    if (std::find(named.begin(), named.end(), false) != named.end()) {
      return Bad("a file record belongs to no node");
    }
    return Ok{};
  }

  Status CheckFiles(const CatalogTables& t) {
    for (size_t i = 0; i < t.files.size(); ++i) {
      const FileExtent& f = t.files[i];
      if (f.group >= t.groups.size()) return Bad("file record {} names a missing group", i);
      if (f.class_id >= t.classes.size()) return Bad("file record {} names a missing class", i);
      const GroupExtent& g = t.groups[f.group];
      const uint64_t in_group = f.offset - g.offset;  // wraps when f.offset < g.offset
      if (f.offset < g.offset || in_group > g.size || f.size > g.size - in_group) {
        return Bad("file record {} lies outside its group", i);
      }
    }
    return Ok{};
  }

 private:
  Status CheckChildren(const CatalogTables& t, uint32_t id) {
    const CatalogNode& node = t.nodes[id];
    const size_t n = t.nodes.size();
    if (node.count > 0 && (node.first <= id || node.first > n || node.count > n - node.first)) {
      return Bad("folder {} has children outside the node table", id);
    }
    uint32_t subdirs = 0;
    for (uint32_t c = node.first; c < node.first + node.count; ++c) {
      if (t.nodes[c].parent != id) return Bad("node {} is listed under the wrong folder", c);
      subdirs += t.nodes[c].is_dir ? 1 : 0;
      if (c > node.first && !(NameOf(t, c - 1) < NameOf(t, c))) {
        return Bad("the children of folder {} are not sorted and unique: '{}' comes after '{}'", id,
                   Printable(NameOf(t, c)), Printable(NameOf(t, c - 1)));
      }
    }
    if (subdirs != node.subdirs) {
      return Bad("folder {} says it has {} subfolders but lists {}", id, node.subdirs, subdirs);
    }
    return Ok{};
  }

  Status CheckFile(const CatalogTables& t, size_t id, std::vector<bool>& named) {
    const uint32_t record = t.nodes[id].first;
    if (record >= t.files.size()) return Bad("node {} names a missing file record", id);
    if (named[record])
      return Bad("node {} names file record {}, which another node names", id, record);
    named[record] = true;
    return Ok{};
  }

  // Children come after their folder, so their names are not bounds-checked yet when the
  // folder's run is compared: out-of-range names read as empty here and fail later.
  static std::string_view NameOf(const CatalogTables& t, uint32_t id) {
    const CatalogNode& node = t.nodes[id];
    if (node.name_offset > t.names.size()) return {};
    return t.names.substr(node.name_offset, node.name_size);
  }

  template <typename... Args>
  Error Bad(fmt::format_string<Args...> format, Args&&... args) {
    return Error{EINVAL, fmt::format("cannot use index {}: {}", path_,
                                     fmt::format(format, std::forward<Args>(args)...))};
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

Status WriteNativeIndex(const Catalog& catalog, const IndexInfo& info,
                        const std::filesystem::path& path, FileAccess access) {
  const CatalogTables& t = catalog.tables();
  if (info.blobs.size() != t.blobs.size()) {
    return Fail(EINVAL, "cannot write index {}: {} blob records for {} blobs", path.string(),
                info.blobs.size(), t.blobs.size());
  }
  IndexImage image;
  image.names.assign(t.names);
  for (const std::string& c : t.classes) image.classes.push_back(image.AddName(c));
  for (size_t i = 0; i < t.blobs.size(); ++i) {
    image.blobs.push_back(
        BlobRecord{image.AddName(t.blobs[i]), info.blobs[i].size, info.blobs[i].checksum});
  }
  const std::array<std::pair<const void*, uint64_t>, kSectionCount> parts = {{
      {image.names.data(), image.names.size()},
      {image.classes.data(), image.classes.size()},
      {image.blobs.data(), image.blobs.size()},
      {t.groups.data(), t.groups.size()},
      {t.nodes.data(), t.nodes.size()},
      {t.files.data(), t.files.size()},
      {t.sha256.data(), t.sha256.size()},
  }};
  if (!t.sha256.empty() && t.sha256.size() != t.files.size()) {
    return Fail(EINVAL, "cannot write index {}: {} SHA-256 digests for {} files", path.string(),
                t.sha256.size(), t.files.size());
  }
  const uint32_t version = t.sha256.empty() ? 1 : kNativeIndexVersion;
  const uint64_t header_size = version == 1 ? sizeof(HeaderV1) : sizeof(Header);
  const int sections = version == 1 ? kSha256 : kSectionCount;
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.flags = (t.has_checksums ? kHasChecksums : 0) | (t.sha256.empty() ? 0 : kHasSha256) |
            (info.tar_listed_as_extracted ? kTarListedAsExtracted : 0);
  h.alignment = info.alignment;
  h.source_size = info.source.size;
  h.source_mtime_ns = info.source.mtime_ns;
  std::string body;
  for (int i = 0; i < sections; ++i) {
    body.resize(Align8(body.size()), '\0');
    h.sections[i] = Section{header_size + body.size(), parts[i].second};
    body.append(static_cast<const char*>(parts[i].first), parts[i].second * kRecordSize[i]);
  }
  h.file_size = header_size + body.size();
  h.body_checksum = XXH3_64bits(body.data(), body.size());
  std::string bytes = HeaderBytes(h, version);
  bytes += body;
  return WriteFileAtomically(path, bytes, access);
}

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
  t.nodes = check.View<CatalogNode>(h, kNodes);
  t.files = check.View<FileExtent>(h, kFiles);
  t.sha256 = check.View<Sha256Digest>(h, kSha256);
  std::vector<StrRef> blob_names;
  for (const BlobRecord& b : blobs) blob_names.push_back(b.name);
  if (Status s = check.CheckNames(t.names, classes, "class"); !s) return s.error();
  if (Status s = check.CheckNames(t.names, blob_names, "blob"); !s) return s.error();
  if (Status s = check.CheckGroups(t.groups, blobs); !s) return s.error();
  t.classes = Strings(t.names, classes);
  t.blobs = Strings(t.names, blob_names);
  t.has_checksums = (h.flags & kHasChecksums) != 0;
  if (Status s = check.CheckNodes(t); !s) return s.error();
  if (Status s = check.CheckFiles(t); !s) return s.error();
  IndexInfo info;
  info.source = SourceStamp{h.source_size, h.source_mtime_ns};
  info.alignment = h.alignment;
  info.tar_listed_as_extracted = (h.flags & kTarListedAsExtracted) != 0;
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
