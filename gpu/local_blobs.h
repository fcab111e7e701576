// The blobs a batch names, as blob sources. A mount names each member's blob by its path
// (user.gpufs.blob); the client reads them through the same LocalSource the daemon uses,
// so it opens, checks and reads files with no code of its own, and every read goes
// through the BlobSource seam.
//
// BlobFiles wants a folder and the names in it up front, but a client learns blob paths
// one batch at a time. So each folder keeps a BlobFiles of every blob of it that a batch
// has named so far; a batch naming a new one replaces it by one that holds that one too.
// Descriptors are opened on first read and kept, so a steady stream of batches over a
// dataset opens each blob about once. The engine (io_uring, else pread threads, picked
// as the daemon picks it) lives as long as the reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "source/blob_files.h"
#include "source/blob_source.h"
#include "source/io_engine.h"
#include "source/local_source.h"

namespace gpufs::gpu {

// One blob of a batch: the source holding it and its id there.
struct BlobRef {
  BlobSource* source = nullptr;
  uint32_t blob = 0;
};

class LocalBlobs {
 public:
  // `depth`: reads worth keeping in flight at once.
  explicit LocalBlobs(unsigned depth);
  ~LocalBlobs();
  LocalBlobs(const LocalBlobs&) = delete;
  LocalBlobs& operator=(const LocalBlobs&) = delete;

  // The blobs at `paths`, in that order; valid until the next call, which must wait until
  // no read of them is in flight. Opens nothing. Not thread-safe.
  std::vector<BlobRef> Find(const std::vector<std::string>& paths);
  // The descriptor of a blob found by the last call, for reads the stager makes itself
  // (cuFile).
  Result<int> Fd(const std::string& path);

 private:
  struct Folder {
    std::vector<std::string> names;  // by blob id
    std::map<std::string, uint32_t> ids;
    std::unique_ptr<BlobFiles> files;
    std::unique_ptr<LocalSource> source;
  };
  void Add(Folder& folder, const std::filesystem::path& dir, const std::vector<std::string>& names);

  std::unique_ptr<IoEngine> engine_;
  std::map<std::filesystem::path, Folder> folders_;
};

}  // namespace gpufs::gpu
