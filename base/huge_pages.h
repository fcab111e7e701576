// Memory that direct reads land in, backed by transparent huge pages where the system
// allows them. A direct read into 4 KiB pages is one segment per page, and the block layer
// splits a request at its device's segment limit (128 segments on a loop device: 512 KiB);
// into 2 MiB pages a 1.25 MiB request stays whole. On a volume that charges per request
// (the benchmarks' throttled volume, a cloud disk's IOPS) that is half the rate or all of
// it.
#pragma once

#include <cstddef>

namespace gpufs {

inline constexpr size_t kHugePage = size_t{2} << 20;

// An anonymous mapping of `bytes` that starts on a 2 MiB boundary, so that transparent huge
// pages can back all of it; MAP_FAILED (errno set) where it cannot be had. Unmap it with
// munmap(p, bytes). Huge pages are asked for only by MADV_HUGEPAGE, which the caller adds.
void* MapHugeAligned(size_t bytes);

// A buffer of at least `bytes`, 2 MiB-aligned, asked to be backed by transparent huge pages
// (MADV_HUGEPAGE), unmapped when it goes. Empty (data() null) where the memory cannot be had.
class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  explicit HugePageBuffer(size_t bytes);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void Release();

  char* data_ = nullptr;
  size_t size_ = 0;  // as mapped: `bytes` rounded up to whole pages
};

}  // namespace gpufs
