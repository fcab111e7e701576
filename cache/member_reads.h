// Reading one member without its group, the ungrouped way: what the group cache does when
// a group cannot be admitted, and all that --cache-size 0 does. With --verify, a member's
// first read takes the whole member, checks its checksum, and serves the asked-for range
// from those same bytes: the bytes checked are the bytes served, never a second read.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "base/error.h"
#include "cache/cached_bytes.h"
#include "dataset/catalog.h"
#include "source/blob_source.h"

namespace gpufs {

// Compares `bytes` (the whole member `file`) with its checksum: EIO naming the member and
// `blob` when they differ.
Status CheckMember(const Catalog& catalog, NodeId file, const char* bytes, std::string_view blob);

// Which members' checksums have matched, one bit each. Thread-safe: two threads may check
// a member the first time, harmless and cheaper than a lock.
class MemberChecks {
 public:
  explicit MemberChecks(size_t files);
  bool Verified(uint32_t file_index) const;
  // Compares `bytes` (the whole member) with its checksum; marks it on a match, else EIO
  // naming the member and `blob`.
  Status Check(const Catalog& catalog, NodeId file, const char* bytes, std::string_view blob);

 private:
  std::unique_ptr<std::atomic<uint64_t>[]> bits_;
};

// How a member's bytes are read from its blob: every byte of [at, at + length), or an error.
using MemberRead = std::function<Status(uint32_t blob, uint64_t at, size_t length, char* buffer)>;

// Up to `size` bytes of member `file` at `offset` (clamped to its end), read from its blob
// for this reply alone; every byte asked for, or an error. `checks` (null: none) verifies
// the member on its first read. `read` (null: the source's kMember read) reads them.
Result<CachedBytes> ReadMemberBytes(BlobSource& source, const Catalog& catalog, NodeId file,
                                    uint64_t offset, size_t size, MemberChecks* checks,
                                    const MemberRead& read = nullptr);

// What serves members' bytes to the filesystem core, its one way to them: the group cache,
// or DirectReads where the mount has none. Thread-safe.
class MemberReader {
 public:
  virtual ~MemberReader() = default;
  // Up to `size` bytes of file node `file` at `offset` (clamped to its end).
  virtual Result<CachedBytes> Read(NodeId file, uint64_t offset, size_t size) = 0;
};

// Without a cache (--cache-size 0): each read from its blob for its reply alone, checked
// on a member's first read with `verify` where the index has checksums.
class DirectReads : public MemberReader {
 public:
  // `source` and `catalog` must outlive the reader.
  DirectReads(BlobSource& source, const Catalog& catalog, bool verify);
  Result<CachedBytes> Read(NodeId file, uint64_t offset, size_t size) override;

 private:
  BlobSource& source_;
  const Catalog& catalog_;
  std::unique_ptr<MemberChecks> checks_;  // with verify
};

}  // namespace gpufs
