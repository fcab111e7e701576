// Reads ranges of local files into the kernel's page cache, in the background, with the
// fewest device requests the page cache allows.
//
// A buffered read fills the page cache with 4 KiB pages, and a device takes at most so many
// segments a request (128 for a loop device, ~254 for virtio and NVMe): ~512 KiB a request,
// where a read of the same range with O_DIRECT takes ~1 MiB. A volume that charges per
// request (a cloud disk, a throttled one) then reads at half its bandwidth. So a range is
// mapped with MADV_HUGEPAGE and MADV_RANDOM and faulted in with MADV_POPULATE_READ: the
// page cache takes it as 2 MiB folios (where the filesystem has large folios: ext4, xfs),
// whole requests of max_sectors_kb, and nothing past the range. Measured on the slow volume
// of tools/bench (120 IOPS, 150 MB/s, 4 MiB ranges): ~1.1 MiB a request against ~0.6 MiB
// for pread, and no read past the range. Where the kernel has no MADV_POPULATE_READ
// (before 5.14), a pread into scratch memory does it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpufs {

class PageCacheAhead {
 public:
  // `threads` read at once, each one range at a time: as many ranges are on their way.
  explicit PageCacheAhead(unsigned threads, uint64_t max_bytes_queued);
  ~PageCacheAhead();
  PageCacheAhead(const PageCacheAhead&) = delete;
  PageCacheAhead& operator=(const PageCacheAhead&) = delete;

  // Queues [offset, offset + length) of the file open as `fd` (which must stay open), the
  // 2 MiB holding byte `first` before the rest; `lead` (when given) runs once those 2 MiB
  // are in the page cache, or failed to come, and `done` once the whole range is. False
  // (nothing queued, neither runs) while max_bytes_queued are queued or on their way.
  // Thread-safe.
  bool Queue(int fd, uint64_t offset, uint64_t length, uint64_t first,
             std::function<void()> lead = nullptr, std::function<void()> done = nullptr);
  uint64_t bytes_read() const;

 private:
  struct Range {
    int fd;
    uint64_t offset, length, first;
    std::function<void()> lead, done;
  };
  void Loop();
  void Read(const Range& range);

  const unsigned threads_;
  const uint64_t max_bytes_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Range> queue_;           // guarded by mu_
  uint64_t bytes_ = 0;                // queued or on their way; guarded by mu_
  uint64_t read_ = 0;                 // read in all; guarded by mu_
  bool stop_ = false;                 // guarded by mu_
  std::vector<std::thread> workers_;  // started with the first range
};

}  // namespace gpufs
