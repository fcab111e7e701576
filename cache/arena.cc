#include "cache/arena.h"

#include <sys/mman.h>

#include <cstring>

namespace gpufs {

Result<std::unique_ptr<PinnedArena>> PinnedArena::Create(size_t bytes) {
  const size_t capacity = RoundUp(std::max<size_t>(bytes, kAlign));
  constexpr size_t kHuge = 2u << 20;
  bool huge = false;
  void* p = MAP_FAILED;
  if (capacity % kHuge == 0) {
    p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);  // fails unless reserved
    huge = p != MAP_FAILED;
  }
  if (p == MAP_FAILED) {
    p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return Fail(errno, "cannot map a {} byte cache: {}", capacity, strerror(errno));
    }
    madvise(p, capacity, MADV_HUGEPAGE);  // transparent huge pages, where enabled
  }
  const bool locked = mlock2(p, capacity, MLOCK_ONFAULT) == 0;
  return std::unique_ptr<PinnedArena>(
      new PinnedArena(static_cast<char*>(p), capacity, locked, huge));
}

PinnedArena::PinnedArena(char* base, size_t capacity, bool locked, bool huge)
    : base_(base), capacity_(capacity), locked_(locked), huge_(huge) {
  free_.emplace(0, capacity);
}

PinnedArena::~PinnedArena() { munmap(base_, capacity_); }

std::optional<size_t> PinnedArena::Allocate(size_t bytes) {
  bytes = RoundUp(std::max<size_t>(bytes, 1));
  std::lock_guard lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < bytes) continue;
    const size_t offset = it->first;
    const size_t rest = it->second - bytes;
    free_.erase(it);
    if (rest > 0) free_.emplace(offset + bytes, rest);
    used_ += bytes;
    return offset;
  }
  return std::nullopt;
}

void PinnedArena::Free(size_t offset, size_t bytes) {
  bytes = RoundUp(std::max<size_t>(bytes, 1));
  std::lock_guard lock(mu_);
  used_ -= bytes;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + bytes == next->first) {  // merge with the range after
    bytes += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {  // and with the range before
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += bytes;
      return;
    }
  }
  free_.emplace(offset, bytes);
}

size_t PinnedArena::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

}  // namespace gpufs
