// A disk tier copy's file format (the layout is described in disk_tier.h): a header that
// names the group and holds a checksum of each block of the payload, padded to 4 KiB, then
// the payload. What is read back is checked block by block against the header.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"

namespace gpufs {

// Copies are written and read with O_DIRECT: buffers, offsets and lengths align to this.
inline constexpr size_t kCopyAlign = 4096;
// The format's version, in every header and in the name of every copy (TierFileName).
inline constexpr uint32_t kCopyVersion = 1;

inline size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<char, FreeDeleter>;
// `bytes` (a multiple of kCopyAlign) aligned for O_DIRECT; null when there is no memory.
AlignedBuffer Aligned(size_t bytes);

// What a copy's header says of it.
struct CopyHeader {
  uint64_t payload = 0;
  size_t header_bytes = 0;
  std::vector<uint64_t> blocks;   // each block's checksum
  size_t block_bytes = 16 << 10;  // as the copy was written (64 KiB before 16 KiB)
};

// The blocks of a payload, and the header's bytes, padded to kCopyAlign.
size_t BlockCount(uint64_t payload, size_t block);
size_t HeaderBytes(size_t name_bytes, uint64_t payload, size_t block);
// The checksum of block `block` of `payload` (`length` bytes in all).
uint64_t BlockChecksum(const char* payload, uint64_t length, size_t block, size_t block_bytes);

// The header of a copy of `length` bytes at `bytes` named `name`, checked in blocks of
// `block`: HeaderBytes long, zero-padded to the alignment.
AlignedBuffer MakeCopyHeader(const std::string& name, const char* bytes, size_t length,
                             size_t block);
// The header of the copy open at `fd`, which must be `name`'s, of `length` bytes (0: any);
// an error says what is wrong with it.
Result<CopyHeader> ReadCopyHeader(int fd, const std::string& name, size_t length);

// Reads until `want` bytes or the end; the bytes read, or -1.
ssize_t ReadFully(int fd, char* buffer, size_t want, uint64_t offset);
// Writes all of `size` bytes; false with errno set when it cannot.
bool WriteFully(int fd, const char* bytes, size_t size, uint64_t offset);

}  // namespace gpufs
