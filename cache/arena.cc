#include "cache/arena.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "base/huge_pages.h"

namespace gpufs {

namespace {

// What the prefault thread populates at a time: a stop waits for one chunk at most.
constexpr size_t kPrefaultChunk = 32u << 20;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

// Faults in [p, p + bytes) for writing without changing a byte: MADV_POPULATE_WRITE, or on
// kernels before 5.14 (EINVAL) a write of each page's first byte with the value it holds (an
// atomic add of zero, since the cache may be filling that page at the same time). False when
// the memory cannot be had (ENOMEM): the rest is then left to fault as it is used.
bool PopulateWrite(char* p, size_t bytes, size_t page) {
  if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0) return true;
  if (errno != EINVAL) return false;
  for (size_t at = 0; at < bytes; at += page) {
    __atomic_fetch_add(p + at, 0, __ATOMIC_RELAXED);
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<PinnedArena>> PinnedArena::Create(size_t bytes, size_t prefault,
                                                         size_t ahead) {
  // Budgets of a huge page or more round up to whole huge pages; small ones (tests) to 4 KiB.
  const size_t unit = bytes >= kHugePage ? kHugePage : kAlign;
  const size_t capacity = (std::max<size_t>(bytes, kAlign) + unit - 1) / unit * unit;
  // Reserved huge pages first; the mapping fails when there are not enough of them.
  void* p = mmap(nullptr, capacity, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
  const bool huge = p != MAP_FAILED;
  if (!huge) {
    p = MapHugeAligned(capacity);  // see base/huge_pages.h for why
    if (p == MAP_FAILED) {
      return Fail(errno, "cannot map a {} byte cache: {}", capacity, strerror(errno));
    }
    madvise(p, capacity, MADV_HUGEPAGE);  // transparent huge pages, where enabled
  }
  const bool locked = mlock2(p, capacity, MLOCK_ONFAULT) == 0;
  std::unique_ptr<PinnedArena> arena(
      new PinnedArena(static_cast<char*>(p), capacity, locked, huge));
  const size_t target = std::min((prefault + unit - 1) / unit * unit, capacity);
  if (target > 0) {
    arena->prefaulter_ =
        std::thread([a = arena.get(), target, ahead] { a->Prefault(target, ahead); });
  }
  return arena;
}

PinnedArena::PinnedArena(char* base, size_t capacity, bool locked, bool huge)
    : base_(base), capacity_(capacity), locked_(locked), huge_(huge) {
  free_.emplace(0, capacity);
}

PinnedArena::~PinnedArena() {
  {
    std::lock_guard lock(mu_);
    stopping_.store(true, std::memory_order_relaxed);
  }
  grown_.notify_all();
  if (prefaulter_.joinable()) prefaulter_.join();
  munmap(base_, capacity_);
}

// On the prefault thread: [0, target) in chunks, counted as each is in, staying `ahead`
// bytes beyond the highest allocation; it sleeps while it is that far ahead.
void PinnedArena::Prefault(size_t target, size_t ahead) {
  const size_t page = huge_ ? kHugePage : kAlign;
  for (size_t at = 0; at < target;) {
    {
      std::unique_lock lock(mu_);
      grown_.wait(lock, [&] {
        return stopping_.load(std::memory_order_relaxed) || high_water_ + ahead > at;
      });
      if (stopping_.load(std::memory_order_relaxed)) return;
    }
    const size_t chunk = std::min(kPrefaultChunk, target - at);
    if (!PopulateWrite(base_ + at, chunk, page)) return;
    at += chunk;
    prefaulted_.store(at, std::memory_order_relaxed);
  }
}

size_t PinnedArena::taken() const {
  std::lock_guard lock(mu_);
  return std::max(prefaulted(), high_water_);
}

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
    if (offset + bytes > high_water_) {
      high_water_ = offset + bytes;
      grown_.notify_one();  // no system call while the prefault thread is busy faulting
    }
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
