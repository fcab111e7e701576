#include "fs/filesystem.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>

#include "base/xattr_names.h"
#include "dataset/format/checksums.h"
#include "dataset/format/name_rules.h"
#include "dataset/printable.h"
#include "fs/kernel_stat.h"

namespace gpufs {
namespace {

constexpr uint64_t kBlockSize = 4096;

}  // namespace

Filesystem::Filesystem(const Catalog& catalog, BlobSource& source, ServeOptions options,
                       GroupCache* cache)
    : catalog_(catalog),
      source_(source),
      options_(std::move(options)),
      cache_(cache),
      direct_(cache ? nullptr : std::make_unique<DirectReads>(source, catalog, options_.verify)),
      reader_(cache ? static_cast<MemberReader&>(*cache) : *direct_) {
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
    st.st_size = static_cast<off_t>(catalog_.SizeAt(catalog_.FileIndex(id)));
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
  std::string name;  // a file's name is its folder's prefix and its suffix, joined here
  for (uint64_t i = offset; i < end; ++i) {
    DirEntry entry;
    entry.next_offset = i + 1;
    if (i < 2) {
      entry.name = i == 0 ? "." : "..";
      entry.attr = AttrOf(i == 0 ? *dir : catalog_.Parent(*dir));
    } else {
      const NodeId child = catalog_.ChildAt(*dir, static_cast<uint32_t>(i - 2));
      name.clear();
      catalog_.ChildName(*dir, child).AppendTo(name);
      entry.name = name;
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

Result<CachedBytes> Filesystem::Fetch(uint64_t ino, uint64_t offset, size_t size) {
  auto id = FileOf(ino);
  if (!id) return id.error();
  const uint64_t file_size = catalog_.Extent(*id).size;
  Result<CachedBytes> bytes = reader_.Read(*id, offset, size);
  if (!bytes) {
    // The reader's file first: the log line then says what failed, and why.
    return Error{
        bytes.error().code,
        fmt::format("cannot read {}: {}", Printable(catalog_.PathOf(*id)), bytes.error().message)};
  }
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

Result<std::string> Filesystem::GetXattr(uint64_t ino, std::string_view name) const {
  auto id = NodeOf(ino);
  if (!id) return id.error();
  if (*id == Catalog::kRoot) {
    // Lets tools find the daemon behind a mount (to wait for its exit, to query it).
    if (name == xattr::kPid) return std::to_string(getpid());
    if (name == xattr::kSource) return options_.source;
    if (name == xattr::kFormat) return options_.format;
    if (name == xattr::kInodes) return std::to_string(references_.load());
    if (name == xattr::kStats) {
      nlohmann::json stats = cache_ ? cache_->Stats() : nlohmann::json::object();
      stats["io"] = source_.Stats();
      stats["kernel"] = KernelStats();
      return stats.dump();
    }
    if (name == xattr::kControl && !control_path_.empty()) return control_path_;
  }
  if (catalog_.IsDir(*id)) return Fail(ENODATA, "no attribute {}", name);
  const FileExtent& file = catalog_.Extent(*id);
  if (name == xattr::kGroup) return std::to_string(file.group);
  // A member decoded from a compressed archive is nowhere in its blob as it is served: a
  // client reading the blob at these offsets would get other bytes.
  if ((name == xattr::kBlob || name == xattr::kOffset) &&
      !source_.LiesAsStored(BlobOf(file), file.offset, file.size)) {
    return Fail(ENODATA, "{} is decoded from a compressed archive", name);
  }
  if (name == xattr::kBlob) return source_.Describe(BlobOf(file));
  if (name == xattr::kOffset) return std::to_string(file.offset);
  if (name == xattr::kSize) return std::to_string(file.size);
  if (name == xattr::kClass) return catalog_.classes()[catalog_.ClassAt(catalog_.FileIndex(*id))];
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
  if (*id == Catalog::kRoot) add(xattr::kRootNames);
  if (*id == Catalog::kRoot && !control_path_.empty()) {
    add(std::array<std::string_view, 1>{xattr::kControl});
  }
  if (!catalog_.IsDir(*id)) add(xattr::kFileNames);
  return list;
}

nlohmann::json Filesystem::KernelStats() const {
  nlohmann::json kernel = options_.kernel;
  kernel[kernel_stat::kTransport] = fuse_transport_name::kDevFuse;
  if (transport_) kernel.update(transport_());
  return kernel;
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
