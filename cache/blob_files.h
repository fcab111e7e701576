// The blob files of a dataset, each opened on first use and then kept open for the life of
// the mount: a read is one pread on a cached descriptor, with no open/close per file.
// Opening lazily keeps mounts with hundreds of thousands of blobs fast and within the
// descriptor limit until the blobs are actually read.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fs/error.h"

namespace gpufs {

class BlobFiles {
 public:
  // `names` are file names relative to `dir`, indexed by group id.
  BlobFiles(std::filesystem::path dir, std::vector<std::string> names);
  ~BlobFiles();
  BlobFiles(const BlobFiles&) = delete;
  BlobFiles& operator=(const BlobFiles&) = delete;

  // Descriptor of blob `group`; thread-safe, opens at most once per blob.
  Result<int> Fd(uint32_t group);

  // A descriptor that bypasses the kernel page cache (O_DIRECT) when the blob's
  // filesystem allows it, else the buffered one; `direct` says which. Thread-safe.
  struct Handle {
    int fd = -1;
    bool direct = false;
  };
  Result<Handle> DirectFd(uint32_t group);

  // Reads exactly `size` bytes at `offset` of blob `group` unless the blob ends first;
  // thread-safe. Returns the number of bytes read.
  Result<size_t> ReadAt(uint32_t group, uint64_t offset, void* buffer, size_t size);

  size_t size() const { return names_.size(); }
  std::filesystem::path PathOf(uint32_t group) const { return dir_ / names_[group]; }

 private:
  std::filesystem::path dir_;
  std::vector<std::string> names_;
  std::unique_ptr<std::atomic<int>[]> fds_;         // -1 until opened; written once by CAS
  std::unique_ptr<std::atomic<int>[]> direct_fds_;  // likewise; -2: O_DIRECT refused
};

// Raises the soft descriptor limit to the hard one so that many blobs can stay open.
void RaiseFileLimit();

}  // namespace gpufs
