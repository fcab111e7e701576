// Which part of a subtree each of the daemon's tiers holds, in one pass over the catalog.
//
// gpufs-stat asks for a whole folder at once rather than a file at a time: the catalog
// walk costs nanoseconds per file, a request through the mount tens of microseconds. The
// pinned tier is known exactly here (a file is resident when its group is). The kernel
// page cache is measured by the caller, but only for files the kernel holds an inode of:
// the others cannot have cached pages, and opening them would only fill the inode cache.
// The disk tier, when the mount has one, is known by which groups have a copy on disk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "dataset/catalog.h"
#include "fs/filesystem.h"
#include "fs/page_cache.h"

namespace gpufs {

enum class ListFiles { kNone, kKernelKnown, kAll };
enum class GroupBy { kNone, kClass, kGroup };

struct ResidencyQuery {
  std::string path;  // relative to the mount root; empty for the root
  ListFiles list = ListFiles::kNone;
  GroupBy by = GroupBy::kNone;
};

struct PageCount {
  uint64_t resident = 0;
  uint64_t total = 0;
};

struct FileResidency {
  std::string_view path;  // relative to the mount root; valid during the callback only
  uint64_t size = 0;
  uint32_t group = 0;
  uint32_t class_id = 0;
  bool pinned = false;        // its group is in the daemon's cache
  bool on_disk = false;       // its group has a copy in the daemon's disk tier
  bool kernel_known = false;  // the kernel holds its inode, so it may have cached pages
};

struct ResidencyBucket {
  uint32_t id = 0;  // class or group id
  uint64_t files = 0;
  PageCount pinned;
  PageCount disk;
};

struct ResidencyReport {
  uint64_t files = 0;
  uint64_t dirs = 0;  // the folder asked about counts, as in vmtouch
  PageCount pinned;
  PageCount disk;
  bool has_disk = false;                 // the mount has a disk tier
  std::vector<ResidencyBucket> buckets;  // by class or group id, those present only
};

// Walks the subtree at `query.path` (a file or a folder) in name order, calling `list` for
// each file `query.list` selects. ENOENT names a path that is not in the catalog.
// Thread-safe: the catalog is immutable and the cache is asked once for a snapshot.
Result<ResidencyReport> Residency(const Filesystem& fs, const ResidencyQuery& query,
                                  const std::function<void(const FileResidency&)>& list);

}  // namespace gpufs
