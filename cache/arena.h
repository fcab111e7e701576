// The daemon's cache memory: one anonymous mapping, locked in RAM so it can be the target
// of direct and GPU DMA without pinning per request, carved into page-aligned ranges.
//
// Huge pages are used when the system has them reserved (MAP_HUGETLB) and asked for
// otherwise (transparent huge pages, on a 2 MiB-aligned mapping; a budget of 2 MiB or more
// is rounded up to whole huge pages). Pages are locked as they are first touched
// (MLOCK_ONFAULT), so a large budget costs nothing until it fills. When locking is not
// allowed (RLIMIT_MEMLOCK) the arena still works, unlocked, and says so.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "dataset/error.h"

namespace gpufs {

class PinnedArena {
 public:
  static constexpr size_t kAlign = 4096;

  static Result<std::unique_ptr<PinnedArena>> Create(size_t bytes);
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

  static size_t RoundUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  PinnedArena(char* base, size_t capacity, bool locked, bool huge);

  char* const base_;
  const size_t capacity_;
  const bool locked_;
  const bool huge_;
  mutable std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length; guarded by mu_
  size_t used_ = 0;                // guarded by mu_
};

}  // namespace gpufs
