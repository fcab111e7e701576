// Blobs in a local folder, read with the I/O engine (io_uring, or pread threads). Group
// loads bypass the page cache (O_DIRECT) where the filesystem allows it, else their pages
// are dropped right after the read; member reads drop the blob's pages too, since the
// kernel caches what is served as the served file. Staged reads leave the page cache be.
#pragma once

#include <atomic>
#include <memory>

#include "source/blob_files.h"
#include "source/blob_source.h"
#include "source/io_engine.h"

namespace gpufs {

class LocalSource : public BlobSource {
 public:
  // `blobs` and `engine` must outlive the source. `part`: the largest single read (0: a
  // whole range as one request).
  LocalSource(BlobFiles& blobs, IoEngine& engine, size_t part = 0);

  std::string_view kind() const override { return "local"; }
  size_t blob_count() const override { return blobs_.size(); }
  std::string Describe(uint32_t blob) const override { return blobs_.PathOf(blob).string(); }
  const BlobInfo* Expected(uint32_t blob) const override { return blobs_.Expected(blob); }
  size_t Alignment() const override { return 4096; }
  size_t PartSize() const override { return part_; }
  void Submit(ReadKind kind, std::vector<BlobRead> reads) override;
  // A pread on the caller's thread: no hand-off for a single read.
  Result<size_t> Read(ReadKind kind, uint32_t blob, uint64_t offset, size_t length,
                      char* buffer) override;
  nlohmann::json Stats() const override;

 private:
  IoRequest RequestFor(ReadKind kind, BlobRead read);

  BlobFiles& blobs_;
  IoEngine& engine_;
  const size_t part_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> bytes_{0};
};

}  // namespace gpufs
