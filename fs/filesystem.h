// The filesystem core: every operation a mount serves, as plain C++ over the catalog and
// the blob files, returning a value or an errno-carrying Error. It knows nothing of FUSE,
// so tests construct it directly and the adapter in fuse_ops only decodes and replies.
//
// Inode numbers are catalog ids + 1 (the root is inode 1, as FUSE requires). The catalog is
// immutable, so lookups, attributes and listings are lock-free; reads touch only the
// thread-safe BlobFiles.
#pragma once

#include <sys/stat.h>
#include <sys/statvfs.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/error.h"
#include "cache/group_cache.h"
#include "cache/member_reads.h"
#include "dataset/catalog.h"
#include "source/blob_source.h"

namespace gpufs {

struct Owner {
  uid_t uid = 0;
  gid_t gid = 0;
};

// The GPU the daemon registered its pinned cache with, for the stats.
struct GpuInfo {
  std::string device;  // what it is, or why there is none
  bool registered = false;
  uint64_t bytes = 0;
  double register_ms = 0;
};

struct ServeOptions {
  Owner owner;               // of every node
  struct timespec mtime {};  // of every node
  std::string source;        // reported by the root's user.gpufs.source
  std::string format;        // and its user.gpufs.format: native, mytar, mytar+index, tar
  bool verify = false;       // check each member's checksum on its first read (without a
                             // cache; a cache is told itself)
  GpuInfo gpu;
  nlohmann::json kernel;  // what the kernel was told at INIT, as the stats report it
};

struct Entry {
  uint64_t ino = 0;
  struct stat attr {};
};

struct DirEntry {
  std::string_view name;
  struct stat attr {};
  uint64_t next_offset = 0;  // offset to resume a listing after this entry
};

class Filesystem {
 public:
  // `catalog`, `source` and `cache` (optional) must outlive the Filesystem.
  Filesystem(const Catalog& catalog, BlobSource& source, ServeOptions options,
             GroupCache* cache = nullptr);

  static constexpr uint64_t kRootIno = 1;
  static uint64_t InoOf(NodeId id) { return uint64_t{id} + 1; }

  Result<Entry> Lookup(uint64_t parent, std::string_view name) const;
  Result<struct stat> GetAttr(uint64_t ino) const;
  // Checks that `ino` can be opened with `flags`: EROFS for any write access, EISDIR for a
  // folder.
  Status Open(uint64_t ino, int flags) const;
  Status OpenDir(uint64_t ino) const;
  // Emits the entries of a folder from `offset` on ("." and ".." first) until `emit`
  // returns false (its reply buffer is full) or the folder ends.
  Status ReadDir(uint64_t ino, uint64_t offset,
                 const std::function<bool(const DirEntry&)>& emit) const;
  // The bytes of a read of `size` at `offset`, clamped to the file's end: from the group
  // cache when there is one (held there until the result is destroyed), else read from
  // the blob for this reply. Every byte asked for is there, or the read fails (EIO): a
  // short reply would tell the kernel the file ends early. Thread-safe.
  Result<CachedBytes> Fetch(uint64_t ino, uint64_t offset, size_t size);
  // user.gpufs.{group,blob,offset,size,class} on files; user.gpufs.{pid,source,format,
  // inodes,stats} on the root (stats: the cache's counters, if any, and the blob source's
  // under "io"), and user.gpufs.control once set; ENODATA otherwise.
  Result<std::string> GetXattr(uint64_t ino, std::string_view name) const;
  // The names above, each NUL-terminated, as listxattr(2) returns them.
  Result<std::string> ListXattr(uint64_t ino) const;
  struct statvfs StatFs() const;
  // What the kernel was told at INIT and what carries its requests (the stats' "kernel").
  nlohmann::json KernelStats() const;

  // The kernel's references to inodes: each entry it was given (lookup, readdirplus) adds
  // one, each forget removes what it says. Inodes are catalog ids, so nothing is freed.
  // Counted per inode: a file the kernel holds no reference to has no inode there, hence
  // no page cache, which lets gpufs-stat skip it; the total (user.gpufs.inodes) shows that
  // forgets balance. Thread-safe.
  void Remember(uint64_t ino, uint64_t references = 1);
  void Forget(uint64_t ino, uint64_t references);
  uint64_t references() const { return references_.load(std::memory_order_relaxed); }
  bool KernelKnows(NodeId id) const { return lookups_[id].load(std::memory_order_relaxed) > 0; }

  // What reads asked for, with or without a cache: every read, its bytes, and the files
  // read to their end (a trainer reads each image whole, so this counts images served).
  struct ServeCounters {
    std::atomic<uint64_t> reads{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> files{0};
  };
  const ServeCounters& served() const { return served_; }

  const Catalog& catalog() const { return catalog_; }
  const ServeOptions& options() const { return options_; }
  const GroupCache* cache() const { return cache_; }
  const BlobSource& source() const { return source_; }
  // Where the daemon answers gpufs-stat (the root's user.gpufs.control); set before serving.
  void SetControlPath(std::string path) { control_path_ = std::move(path); }
  // What carries the kernel's requests, as the stats report it under "kernel" (an object
  // whose keys are added there); set before serving, called at each stats read.
  void SetTransport(std::function<nlohmann::json()> describe) { transport_ = std::move(describe); }

 private:
  Result<NodeId> NodeOf(uint64_t ino) const;
  Result<NodeId> FileOf(uint64_t ino) const;
  void Count(uint64_t offset, size_t length, uint64_t file_size);
  uint32_t BlobOf(const FileExtent& file) const;
  struct stat AttrOf(NodeId id) const;

  const Catalog& catalog_;
  BlobSource& source_;
  const ServeOptions options_;
  GroupCache* const cache_;
  std::unique_ptr<DirectReads> direct_;  // without a cache
  MemberReader& reader_;                 // the cache, or direct_: Fetch's one way to bytes
  std::unique_ptr<std::atomic<uint32_t>[]> lookups_;  // by node id
  std::atomic<uint64_t> references_{0};
  ServeCounters served_;
  std::string control_path_;
  std::function<nlohmann::json()> transport_;
};

}  // namespace gpufs
