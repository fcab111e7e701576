// Blobs in a local folder, read with the I/O engine (io_uring, or pread threads). Group
// loads bypass the page cache (O_DIRECT) where the filesystem allows it, else their pages
// are dropped right after the read; member reads drop the blob's pages too, since the
// kernel caches what is served as the served file. Staged reads leave the page cache be,
// and so do whole groups read ahead for the files of a group the budget cannot pin
// (cache/miss_reads.h): each file's pages go once it is served.
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>

#include "source/blob_files.h"
#include "source/blob_source.h"
#include "source/io_engine.h"
#include "source/page_cache_ahead.h"

namespace gpufs {

// The largest request the block device holding `path` takes whole (its queue's
// max_sectors_kb), so that a read of that size costs the device one I/O; 0 when the file
// is not on a block device (tmpfs, overlay, a network filesystem) or sysfs does not say.
uint64_t DeviceRequestBytes(const std::filesystem::path& path);

class LocalSource : public BlobSource {
 public:
  // `blobs` and `engine` must outlive the source. `part`: the largest single read (0: the
  // largest request the blobs' device takes whole, between 256 KiB and 4 MiB).
  LocalSource(BlobFiles& blobs, IoEngine& engine, size_t part = 0);

  std::string_view kind() const override { return "local"; }
  size_t blob_count() const override { return blobs_.size(); }
  std::string Describe(uint32_t blob) const override { return blobs_.PathOf(blob).string(); }
  const BlobInfo* Expected(uint32_t blob) const override { return blobs_.Expected(blob); }
  size_t Alignment() const override { return 4096; }
  size_t PartSize() const override { return part_; }
  // About 32 MiB in flight. A volume throttled per time slice (a cloud disk, cgroup blkio)
  // gives its full rate only while its queue never runs dry: measured on a 150 MB/s
  // volume, 8 MiB in flight reached 125-140 MB/s and 32 MiB the cap. A demanded part
  // waits behind no more than that.
  unsigned PartsInFlight() const override;
  void Submit(ReadKind kind, std::vector<BlobRead> reads) override;
  // A pread on the caller's thread: no hand-off for a single read.
  Result<size_t> Read(ReadKind kind, uint32_t blob, uint64_t offset, size_t length,
                      char* buffer) override;
  std::optional<DeviceShape> PageCacheShape() const override;
  // Through PageCacheAhead: at most about 32 MiB queued or on their way at once.
  bool Readahead(uint32_t blob, uint64_t offset, size_t length, uint64_t first,
                 std::function<void()> landed, std::function<void()> done) override;
  Result<size_t> ReadCached(uint32_t blob, uint64_t offset, size_t length, char* buffer) override;
  nlohmann::json Stats() const override;

 private:
  IoRequest RequestFor(ReadKind kind, BlobRead read);

  BlobFiles& blobs_;
  IoEngine& engine_;
  const size_t part_;
  const DeviceShape shape_;  // of the blobs' device, read once
  PageCacheAhead ahead_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace gpufs
