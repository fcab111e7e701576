// What opening a dataset gives, and where an archive's index may be kept.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "base/private_files.h"
#include "dataset/catalog.h"
#include "dataset/compressed/decode_plan.h"
#include "dataset/format/native_index.h"
#include "dataset/format/progress.h"

namespace gpufs {

struct OpenOptions {
  std::optional<uint32_t> group_size;  // picks a mytar group-size folder
  std::filesystem::path cache_dir;     // where tar indexes go when beside is read-only
  uint64_t tar_group_bytes = 16ull << 20;
  Progress* progress = nullptr;  // what a tar's first listing has walked, for a display
};

struct Dataset {
  std::filesystem::path dir;  // blob names are relative to it
  Catalog catalog;
  std::vector<BlobInfo> blobs;     // expected size (at least) and checksum of each blob
  std::string format;              // "native", "mytar", "mytar+index", "tar"
  std::filesystem::path index;     // the file the catalog came from
  struct timespec mtime {};        // shown as every node's time
  std::vector<std::string> notes;  // worth telling the user: a stale index, skipped entries
  // How a compressed archive's groups are decoded (decode_plan.h): one plan per blob served
  // decoded; none for every other dataset.
  std::vector<DecodePlan> plans;
};

// A place for an archive's index: beside the archive, or in the user's private cache.
struct IndexPlace {
  std::filesystem::path path;
  // Beside the data, where others may have put a file: read only when OpenTrustedIndex
  // trusts it (owned by the user or by `data_owner`, written by no one else), and written
  // readable as the data is (`mode`). Otherwise in the private cache: 0600.
  bool beside = false;
  uid_t data_owner = 0;
  mode_t mode = 0600;
};

// The private folder archives' indexes are kept in when they cannot be kept beside.
inline const FolderRole kIndexCacheRole{
    "index cache", "give each user a cache folder of their own (XDG_CACHE_HOME)"};

}  // namespace gpufs
