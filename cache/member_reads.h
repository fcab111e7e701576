// Reading one member without its group, the ungrouped way: what the group cache does when
// a group cannot be admitted, and all that --cache-size 0 does. With --verify, a member's
// first read takes the whole member, checks its checksum, and serves the asked-for range
// from those same bytes: the bytes checked are the bytes served, never a second read.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "cache/cached_bytes.h"
#include "dataset/catalog.h"
#include "dataset/error.h"
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

// Up to `size` bytes of member `file` at `offset` (clamped to its end), read from its blob
// for this reply alone; every byte asked for, or an error. `checks` (null: none) verifies
// the member on its first read.
Result<CachedBytes> ReadMemberBytes(BlobSource& source, const Catalog& catalog, NodeId file,
                                    uint64_t offset, size_t size, MemberChecks* checks);

}  // namespace gpufs
