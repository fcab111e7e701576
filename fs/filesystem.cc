#include "fs/filesystem.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "dataset/format/checksums.h"
#include "dataset/format/name_rules.h"

namespace gpufs {
namespace {

constexpr std::array<std::string_view, 5> kXattrNames = {"user.gpufs.group", "user.gpufs.blob",
                                                         "user.gpufs.offset", "user.gpufs.size",
                                                         "user.gpufs.class"};

constexpr std::array<std::string_view, 4> kRootXattrNames = {
    "user.gpufs.pid", "user.gpufs.source", "user.gpufs.format", "user.gpufs.inodes"};

constexpr uint64_t kBlockSize = 4096;

}  // namespace

Filesystem::Filesystem(const Catalog& catalog, BlobFiles& blobs, ServeOptions options,
                       GroupCache* cache)
    : catalog_(catalog), blobs_(blobs), options_(std::move(options)), cache_(cache) {
  if (options_.verify) {
    const size_t words = (catalog_.file_count() + 63) / 64;
    verified_ = std::make_unique<std::atomic<uint64_t>[]>(words);
    for (size_t i = 0; i < words; ++i) verified_[i].store(0, std::memory_order_relaxed);
  }
  lookups_ = std::make_unique<std::atomic<uint32_t>[]>(catalog_.node_count());
  for (size_t i = 0; i < catalog_.node_count(); ++i) {
    lookups_[i].store(0, std::memory_order_relaxed);
  }
}

void Filesystem::Remember(uint64_t ino, uint64_t references) {
  if (auto id = NodeOf(ino)) {
    lookups_[*id].fetch_add(static_cast<uint32_t>(references), std::memory_order_relaxed);
    references_.fetch_add(references, std::memory_order_relaxed);
  }
}

void Filesystem::Forget(uint64_t ino, uint64_t references) {
  if (auto id = NodeOf(ino)) {
    lookups_[*id].fetch_sub(static_cast<uint32_t>(references), std::memory_order_relaxed);
    references_.fetch_sub(references, std::memory_order_relaxed);
  }
}

Result<NodeId> Filesystem::NodeOf(uint64_t ino) const {
  if (ino == 0 || ino - 1 > UINT32_MAX || !catalog_.Contains(static_cast<NodeId>(ino - 1))) {
    return Fail(ENOENT, "no inode {}", ino);
  }
  return static_cast<NodeId>(ino - 1);
}

struct stat Filesystem::AttrOf(NodeId id) const {
  struct stat st {};
  st.st_ino = InoOf(id);
  st.st_uid = options_.owner.uid;
  st.st_gid = options_.owner.gid;
  st.st_atim = st.st_mtim = st.st_ctim = options_.mtime;
  st.st_blksize = kBlockSize;
  if (catalog_.IsDir(id)) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2 + catalog_.SubdirCount(id);
    st.st_size = kBlockSize;
  } else {
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
    st.st_size = static_cast<off_t>(catalog_.Extent(id).size);
  }
  st.st_blocks = (st.st_size + 511) / 512;
  return st;
}

Result<Entry> Filesystem::Lookup(uint64_t parent, std::string_view name) const {
  auto dir = NodeOf(parent);
  if (!dir) return dir.error();
  if (!catalog_.IsDir(*dir)) return Fail(ENOTDIR, "inode {} is not a folder", parent);
  auto child = catalog_.Find(*dir, name);
  if (!child) return Fail(ENOENT, "no '{}' in inode {}", name, parent);
  return Entry{InoOf(*child), AttrOf(*child)};
}

Result<struct stat> Filesystem::GetAttr(uint64_t ino) const {
  auto id = NodeOf(ino);
  if (!id) return id.error();
  return AttrOf(*id);
}

Status Filesystem::Open(uint64_t ino, int flags) const {
  auto id = NodeOf(ino);
  if (!id) return id.error();
  if ((flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC)) {
    return Fail(EROFS, "inode {} is on a read-only filesystem", ino);
  }
  if (catalog_.IsDir(*id)) return Fail(EISDIR, "inode {} is a folder", ino);
  return Ok{};
}

Status Filesystem::OpenDir(uint64_t ino) const {
  auto id = NodeOf(ino);
  if (!id) return id.error();
  if (!catalog_.IsDir(*id)) return Fail(ENOTDIR, "inode {} is not a folder", ino);
  return Ok{};
}

Status Filesystem::ReadDir(uint64_t ino, uint64_t offset,
                           const std::function<bool(const DirEntry&)>& emit) const {
  auto dir = NodeOf(ino);
  if (!dir) return dir.error();
  if (!catalog_.IsDir(*dir)) return Fail(ENOTDIR, "inode {} is not a folder", ino);
  const uint64_t end = 2 + uint64_t{catalog_.ChildCount(*dir)};
  for (uint64_t i = offset; i < end; ++i) {
    DirEntry entry;
    entry.next_offset = i + 1;
    if (i < 2) {
      entry.name = i == 0 ? "." : "..";
      entry.attr = AttrOf(i == 0 ? *dir : catalog_.Parent(*dir));
    } else {
      const NodeId child = catalog_.FirstChild(*dir) + static_cast<NodeId>(i - 2);
      entry.name = catalog_.Name(child);
      entry.attr = AttrOf(child);
    }
    if (!emit(entry)) break;
  }
  return Ok{};
}

uint32_t Filesystem::BlobOf(const FileExtent& file) const {
  return catalog_.Group(file.group).blob;
}

Result<NodeId> Filesystem::FileOf(uint64_t ino) const {
  auto id = NodeOf(ino);
  if (!id) return id.error();
  if (catalog_.IsDir(*id)) return Fail(EISDIR, "inode {} is a folder", ino);
  return id;
}

// Reads the whole member once and compares its checksum; later reads skip the check. Two
// threads may both check a member the first time: harmless, and cheaper than a lock.
Status Filesystem::Verify(NodeId id) {
  if (!verified_ || !catalog_.has_checksums()) return Ok{};
  const uint32_t index = catalog_.FileIndex(id);
  const uint64_t bit = uint64_t{1} << (index % 64);
  if (verified_[index / 64].load(std::memory_order_acquire) & bit) return Ok{};
  const FileExtent& file = catalog_.Extent(id);
  std::string bytes(file.size, '\0');
  auto got = blobs_.ReadAt(BlobOf(file), file.offset, bytes.data(), bytes.size());
  if (!got) return got.error();
  if (*got != bytes.size() || ChecksumOf(bytes.data(), bytes.size()) != file.checksum) {
    return Fail(EIO, "cannot read {}: its checksum does not match; {} is damaged",
                catalog_.PathOf(id), blobs_.PathOf(BlobOf(file)).string());
  }
  verified_[index / 64].fetch_or(bit, std::memory_order_acq_rel);
  return Ok{};
}

Result<CachedBytes> Filesystem::Fetch(uint64_t ino, uint64_t offset, size_t size) {
  auto id = FileOf(ino);
  if (!id) return id.error();
  if (Status s = Verify(*id); !s) return s.error();
  const uint64_t file_size = catalog_.Extent(*id).size;
  Result<CachedBytes> bytes = CachedBytes{};
  if (cache_) {
    bytes = cache_->Read(*id, offset, size);
  } else if (offset < file_size) {
    const size_t length = static_cast<size_t>(std::min<uint64_t>(size, file_size - offset));
    auto owned = std::make_unique<char[]>(length);
    auto got = Read(ino, offset, {owned.get(), length});
    if (!got) return got.error();
    bytes = CachedBytes::Owned(std::move(owned), length);
  }
  if (!bytes) return bytes.error();
  if (bytes->size() > 0) Count(offset, bytes->size(), file_size);
  return bytes;
}

void Filesystem::Count(uint64_t offset, size_t length, uint64_t file_size) {
  served_.reads.fetch_add(1, std::memory_order_relaxed);
  served_.bytes.fetch_add(length, std::memory_order_relaxed);
  if (length > 0 && offset + length >= file_size) {
    served_.files.fetch_add(1, std::memory_order_relaxed);
  }
}

Result<size_t> Filesystem::Read(uint64_t ino, uint64_t offset, std::span<char> out) {
  auto id = FileOf(ino);
  if (!id) return id.error();
  if (Status s = Verify(*id); !s) return s.error();
  const FileExtent& file = catalog_.Extent(*id);
  if (offset >= file.size) return size_t{0};
  const size_t length = static_cast<size_t>(std::min<uint64_t>(out.size(), file.size - offset));
  auto got = blobs_.ReadToServe(BlobOf(file), file.offset + offset, out.data(), length);
  if (!got) return got.error();
  if (*got != length) {
    return Fail(EIO, "cannot read {}: blob {} ends early", catalog_.PathOf(*id),
                blobs_.PathOf(BlobOf(file)).string());
  }
  return *got;
}

Result<std::string> Filesystem::GetXattr(uint64_t ino, std::string_view name) const {
  auto id = NodeOf(ino);
  if (!id) return id.error();
  if (*id == Catalog::kRoot) {
    // Lets tools find the daemon behind a mount (to wait for its exit, to query it).
    if (name == kRootXattrNames[0]) return std::to_string(getpid());
    if (name == kRootXattrNames[1]) return options_.source;
    if (name == kRootXattrNames[2]) return options_.format;
    if (name == kRootXattrNames[3]) return std::to_string(references_.load());
    if (name == "user.gpufs.stats" && cache_) return cache_->Stats().dump();
    if (name == "user.gpufs.control" && !control_path_.empty()) return control_path_;
  }
  if (catalog_.IsDir(*id)) return Fail(ENODATA, "no attribute {}", name);
  const FileExtent& file = catalog_.Extent(*id);
  if (name == kXattrNames[0]) return std::to_string(file.group);
  if (name == kXattrNames[1]) return blobs_.PathOf(BlobOf(file)).string();
  if (name == kXattrNames[2]) return std::to_string(file.offset);
  if (name == kXattrNames[3]) return std::to_string(file.size);
  if (name == kXattrNames[4]) return catalog_.classes()[file.class_id];
  return Fail(ENODATA, "no attribute {}", name);
}

Result<std::string> Filesystem::ListXattr(uint64_t ino) const {
  auto id = NodeOf(ino);
  if (!id) return id.error();
  std::string list;
  auto add = [&list](const auto& names) {
    for (std::string_view name : names) {
      list += name;
      list += '\0';
    }
  };
  if (*id == Catalog::kRoot) add(kRootXattrNames);
  if (*id == Catalog::kRoot && cache_) add(std::array<std::string_view, 1>{"user.gpufs.stats"});
  if (*id == Catalog::kRoot && !control_path_.empty()) {
    add(std::array<std::string_view, 1>{"user.gpufs.control"});
  }
  if (!catalog_.IsDir(*id)) add(kXattrNames);
  return list;
}

struct statvfs Filesystem::StatFs() const {
  struct statvfs st {};
  st.f_bsize = kBlockSize;
  st.f_frsize = kBlockSize;
  st.f_blocks = (catalog_.total_bytes() + kBlockSize - 1) / kBlockSize;
  st.f_files = catalog_.node_count();
  st.f_namemax = kNameMax;
  return st;
}

}  // namespace gpufs
