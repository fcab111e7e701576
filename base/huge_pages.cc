#include "base/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <utility>

namespace gpufs {

void* MapHugeAligned(size_t bytes) {
  // Map a huge page more than asked and trim both ends to the first 2 MiB boundary in it.
  void* p =
      mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return p;
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = aligned + bytes;
  if (start + bytes + kHugePage > end) {
    munmap(reinterpret_cast<void*>(end), start + bytes + kHugePage - end);
  }
  return reinterpret_cast<void*>(aligned);
}

HugePageBuffer::HugePageBuffer(size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t size = (bytes + page - 1) / page * page;
  if (size == 0) return;
  void* p = MapHugeAligned(size);
  if (p == MAP_FAILED) return;
  madvise(p, size, MADV_HUGEPAGE);  // a hint: without it the buffer is plain pages
  data_ = static_cast<char*>(p);
  size_ = size;
}

HugePageBuffer::~HugePageBuffer() { Release(); }

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void HugePageBuffer::Release() {
  if (data_) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace gpufs
