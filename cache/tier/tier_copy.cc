// A disk tier copy's file format (the layout is described in disk_tier.h).
#include "cache/tier/tier_copy.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "dataset/format/checksums.h"

namespace gpufs {
namespace {

constexpr char kMagic[8] = {'G', 'P', 'U', 'F', 'S', 'D', 'T', '\n'};

// Block sizes a copy may have been written with: a power of two, 4 KiB to 1 MiB.
bool KnownBlockBytes(uint32_t bytes) {
  return bytes >= kCopyAlign && bytes <= (1u << 20) && (bytes & (bytes - 1)) == 0;
}

// The fixed start of a copy's header; the name (padded to 8 bytes) and the block
// checksums follow. Host byte order: the tier is a node's local disk.
struct FixedHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t payload;
  uint32_t block_bytes;
  uint32_t name_bytes;
};
static_assert(sizeof(FixedHeader) == 32);

}  // namespace

size_t BlockCount(uint64_t payload, size_t block) { return (payload + block - 1) / block; }
size_t HeaderBytes(size_t name_bytes, uint64_t payload, size_t block) {
  return RoundUp(sizeof(FixedHeader) + RoundUp(name_bytes, 8) + 8 * BlockCount(payload, block),
                 kCopyAlign);
}

AlignedBuffer Aligned(size_t bytes) {
  return AlignedBuffer(static_cast<char*>(std::aligned_alloc(kCopyAlign, bytes)));
}

// Reads until `want` bytes or the end; the bytes read, or -1.
ssize_t ReadFully(int fd, char* buffer, size_t want, uint64_t offset) {
  size_t got = 0;
  while (got < want) {
    const ssize_t n = pread(fd, buffer + got, want - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -1;
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(got);
}

bool WriteFully(int fd, const char* bytes, size_t size, uint64_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pwrite(fd, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

uint64_t BlockChecksum(const char* payload, uint64_t length, size_t block, size_t block_bytes) {
  const uint64_t start = uint64_t{block} * block_bytes;
  return ChecksumOf(payload + start, std::min<uint64_t>(block_bytes, length - start));
}

// The header of a copy of `length` bytes at `bytes` named `name`, checked in blocks of
// `block`: HeaderBytes long, zero-padded to the alignment.
AlignedBuffer MakeCopyHeader(const std::string& name, const char* bytes, size_t length,
                             size_t block) {
  const size_t header_bytes = HeaderBytes(name.size(), length, block);
  AlignedBuffer header = Aligned(header_bytes);
  std::memset(header.get(), 0, header_bytes);
  FixedHeader fixed{{},
                    kCopyVersion,
                    static_cast<uint32_t>(header_bytes),
                    length,
                    static_cast<uint32_t>(block),
                    static_cast<uint32_t>(name.size())};
  std::memcpy(fixed.magic, kMagic, sizeof(kMagic));
  std::memcpy(header.get(), &fixed, sizeof(fixed));
  std::memcpy(header.get() + sizeof(fixed), name.data(), name.size());
  char* blocks = header.get() + sizeof(fixed) + RoundUp(name.size(), 8);
  for (size_t b = 0; b < BlockCount(length, block); ++b) {
    const uint64_t sum = BlockChecksum(bytes, length, b, block);
    std::memcpy(blocks + 8 * b, &sum, 8);
  }
  return header;
}

Result<CopyHeader> ReadCopyHeader(int fd, const std::string& name, size_t length) {
  AlignedBuffer first = Aligned(kCopyAlign);
  if (ReadFully(fd, first.get(), kCopyAlign, 0) < static_cast<ssize_t>(sizeof(FixedHeader))) {
    return Fail(EIO, "no header");
  }
  FixedHeader fixed{};
  std::memcpy(&fixed, first.get(), sizeof(fixed));
  if (std::memcmp(fixed.magic, kMagic, sizeof(kMagic)) != 0 || fixed.version != kCopyVersion ||
      !KnownBlockBytes(fixed.block_bytes) || fixed.name_bytes != name.size() ||
      (length != 0 && fixed.payload != length) ||
      fixed.header_bytes != HeaderBytes(name.size(), fixed.payload, fixed.block_bytes)) {
    return Fail(EIO, "a header that does not match");
  }
  AlignedBuffer whole = std::move(first);
  if (fixed.header_bytes > kCopyAlign) {
    whole = Aligned(fixed.header_bytes);
    if (ReadFully(fd, whole.get(), fixed.header_bytes, 0) != fixed.header_bytes) {
      return Fail(EIO, "a short header");
    }
  }
  if (std::string_view(whole.get() + sizeof(FixedHeader), name.size()) != name) {
    return Fail(EIO, "another group's header");
  }
  CopyHeader header{fixed.payload, fixed.header_bytes,
                    std::vector<uint64_t>(BlockCount(fixed.payload, fixed.block_bytes)),
                    fixed.block_bytes};
  std::memcpy(header.blocks.data(), whole.get() + sizeof(FixedHeader) + RoundUp(name.size(), 8),
              8 * header.blocks.size());
  return header;
}

}  // namespace gpufs
