// The blob files of a dataset, each opened on first use and then kept open for the life of
// the mount: a read is one pread on a cached descriptor, with no open/close per file.
// Opening lazily keeps mounts with hundreds of thousands of blobs fast and within the
// descriptor limit until the blobs are actually read.
//
// A dataset is untrusted input and its folder may change under a mount. Every blob is
// opened beneath the dataset folder (no name or link leads out of it), and every hand-out
// of a descriptor first compares the blob with what the mount saw of it (size, and the
// modification time): one fstat, cheap next to the read it precedes. A blob that was
// deleted, truncated, rewritten or replaced is refused with EIO naming it, never served.
// A descriptor opened before the change still reads the bytes the mount was given.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "dataset/format/native_index.h"

namespace gpufs {

class BlobFiles {
 public:
  // `names` are single path segments in `dir`, indexed by blob id. `expected` is empty (no
  // checks) or holds, per blob, what the mount saw of it (see StampBlobFiles).
  BlobFiles(std::filesystem::path dir, std::vector<std::string> names,
            std::vector<BlobInfo> expected = {});
  ~BlobFiles();
  BlobFiles(const BlobFiles&) = delete;
  BlobFiles& operator=(const BlobFiles&) = delete;

  // Descriptor of blob `blob`, checked against what the mount saw; thread-safe, opens at
  // most once per blob. Every failure is EIO, with the reason in the message.
  Result<int> Fd(uint32_t blob);

  // A descriptor that bypasses the kernel page cache (O_DIRECT) when the blob's
  // filesystem allows it, else the buffered one; `direct` says which. Checked like Fd.
  // Thread-safe.
  struct Handle {
    int fd = -1;
    bool direct = false;
  };
  Result<Handle> DirectFd(uint32_t blob);

  // Reads exactly `size` bytes at `offset` of blob `blob` unless the blob ends first;
  // thread-safe. Returns the number of bytes read.
  Result<size_t> ReadAt(uint32_t blob, uint64_t offset, void* buffer, size_t size);
  // ReadAt for bytes about to be served, which the kernel then caches as the served file:
  // the range is dropped from the blob's page cache, which would hold a second copy.
  Result<size_t> ReadToServe(uint32_t blob, uint64_t offset, void* buffer, size_t size);

  // ReadToServe of bytes the page cache holds now, never waiting on the device
  // (preadv2 RWF_NOWAIT): every byte, or EAGAIN.
  Result<size_t> ReadCachedToServe(uint32_t blob, uint64_t offset, void* buffer, size_t size);
  // What the mount saw of `blob`, or null when it was given nothing to check.
  const BlobInfo* Expected(uint32_t blob) const;

  size_t size() const { return names_.size(); }
  std::filesystem::path PathOf(uint32_t blob) const { return dir_ / names_[blob]; }

 private:
  Result<int> Open(uint32_t blob, int flags);
  Status CheckUnchanged(uint32_t blob, int fd) const;
  Result<size_t> PreadAll(uint32_t blob, int fd, uint64_t offset, void* buffer, size_t size) const;

  std::filesystem::path dir_;
  int dir_fd_ = -1;  // O_PATH; blobs are opened beneath it
  int dir_errno_ = 0;
  std::vector<std::string> names_;
  std::vector<BlobInfo> expected_;
  std::unique_ptr<std::atomic<int>[]> fds_;         // -1 until opened; written once by CAS
  std::unique_ptr<std::atomic<int>[]> direct_fds_;  // likewise; -2: O_DIRECT refused
};

// Raises the soft descriptor limit to the hard one so that many blobs can stay open.
void RaiseFileLimit();

}  // namespace gpufs
