#include "cache/arena.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstring>

namespace gpufs {

namespace {

constexpr size_t kHuge = 2u << 20;

// An anonymous mapping of `capacity` bytes starting on a 2 MiB boundary, so transparent
// huge pages can back it: a 4 MiB direct read into huge pages is a handful of segments,
// into 4 KiB pages a thousand, which the block layer splits into more requests (on the
// throttled benchmark volume that halved the cold-epoch rate).
void* MapAligned(size_t capacity) {
  void* p =
      mmap(nullptr, capacity + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return p;
  const auto start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = aligned + capacity;
  if (start + capacity + kHuge > end)
    munmap(reinterpret_cast<void*>(end), start + capacity + kHuge - end);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

Result<std::unique_ptr<PinnedArena>> PinnedArena::Create(size_t bytes) {
  // Budgets of a huge page or more round up to whole huge pages; small ones (tests) to 4 KiB.
  const size_t unit = bytes >= kHuge ? kHuge : kAlign;
  const size_t capacity = (std::max<size_t>(bytes, kAlign) + unit - 1) / unit * unit;
  // Reserved huge pages first; the mapping fails when there are not enough of them.
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  const bool huge = p != MAP_FAILED;
  if (!huge) {
    p = MapAligned(capacity);
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
