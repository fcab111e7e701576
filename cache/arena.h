// The daemon's cache memory: one anonymous mapping, locked in RAM so it can be the target
// of direct and GPU DMA without pinning per request, carved into page-aligned ranges.
//
// Huge pages are used when the system has them reserved (MAP_HUGETLB) and asked for
// otherwise (transparent huge pages, on a 2 MiB-aligned mapping; a budget of 2 MiB or more
// is rounded up to whole huge pages). Pages are locked as they are first touched
// (MLOCK_ONFAULT), so a large budget costs nothing until it fills. When locking is not
// allowed (RLIMIT_MEMLOCK) the arena still works, unlocked, and says so.
//
// A page's first write costs the kernel a fault and the zeroing of the page: on a cold epoch
// from a store that was most of the daemon's CPU, paid by the threads that copy bodies in.
// So pages are faulted in by a thread of the arena's own, from offset 0 upward, a window
// (`ahead`) beyond the highest byte handed out so far and never past `prefault`: memory is
// taken as the cache fills, not the whole budget at mount, yet the copies land on pages
// already there. Allocate is first fit from the lowest offset, so the cache fills the
// populated part first and then reuses it as it evicts. The thread is started by Create:
// create the arena in the process that serves (after a daemon forks), since threads do
// not survive a fork.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "base/error.h"

namespace gpufs {

class PinnedArena {
 public:
  static constexpr size_t kAlign = 4096;

  // Pages faulted in ahead of the highest byte handed out, by default.
  static constexpr size_t kDefaultAhead = size_t{256} << 20;

  // An arena of `bytes` (rounded up), of which the first `prefault` at most are faulted in
  // by a background thread, `ahead` bytes beyond the highest one allocated so far.
  static Result<std::unique_ptr<PinnedArena>> Create(size_t bytes, size_t prefault = 0,
                                                     size_t ahead = kDefaultAhead);
  // Stops the prefault thread (within one chunk), then unmaps.
  ~PinnedArena();
  PinnedArena(const PinnedArena&) = delete;
  PinnedArena& operator=(const PinnedArena&) = delete;

  // A free range of at least `bytes`, page-aligned, first fit; thread-safe.
  std::optional<size_t> Allocate(size_t bytes);
  // Returns a range from Allocate; thread-safe.
  void Free(size_t offset, size_t bytes);

  char* base() const { return base_; }
  size_t capacity() const { return capacity_; }
  size_t used() const;
  bool locked() const { return locked_; }
  bool huge_pages() const { return huge_; }
  // Bytes from offset 0 the prefault thread has faulted in so far. Thread-safe.
  size_t prefaulted() const { return prefaulted_.load(std::memory_order_relaxed); }
  // Bytes of memory the arena holds now: what was faulted in ahead, or written past it.
  size_t taken() const;

  static size_t RoundUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  PinnedArena(char* base, size_t capacity, bool locked, bool huge);
  void Prefault(size_t target, size_t ahead);

  char* const base_;
  const size_t capacity_;
  const bool locked_;
  const bool huge_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length; guarded by mu_
  size_t used_ = 0;                // guarded by mu_
  std::atomic<size_t> prefaulted_{0};
  size_t high_water_ = 0;          // the end of the highest range handed out; guarded by mu_
  std::condition_variable grown_;  // high_water_ grew, or stopping_; with mu_
  std::atomic<bool> stopping_{false};
  std::thread prefaulter_;  // none when nothing is to be prefaulted
};

}  // namespace gpufs
