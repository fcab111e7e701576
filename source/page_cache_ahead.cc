#include "source/page_cache_ahead.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

namespace gpufs {
namespace {

#ifndef MADV_POPULATE_READ
constexpr int MADV_POPULATE_READ = 22;  // linux/mman.h, Linux 5.14
#endif

constexpr uint64_t kFolio = 2 << 20;  // a PMD-sized folio, what MADV_HUGEPAGE asks for
constexpr size_t kScratch = 1 << 20;

// Where MADV_POPULATE_READ is missing: buffered reads whose bytes are thrown away.
void PreadInto(int fd, uint64_t offset, uint64_t length) {
  const auto scratch = std::make_unique<char[]>(kScratch);
  for (uint64_t at = offset; at < offset + length;) {
    const ssize_t n = pread(fd, scratch.get(), std::min<uint64_t>(kScratch, offset + length - at),
                            static_cast<off_t>(at));
    if (n <= 0) return;  // a hint: the read that needs the bytes reports the failure
    at += static_cast<uint64_t>(n);
  }
}

// Faults [from, to) of `map` (which maps the file from `base`) in; false where the kernel
// cannot (no MADV_POPULATE_READ), so that the caller reads another way.
bool Populate(char* map, uint64_t base, uint64_t from, uint64_t to) {
  if (from >= to) return true;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t start = (from - base) / page * page;  // madvise takes whole pages
  // EFAULT past the file's end (a blob truncated under the mount): nothing more to read.
  return madvise(map + start, to - base - start, MADV_POPULATE_READ) == 0 || errno != EINVAL;
}

}  // namespace

PageCacheAhead::PageCacheAhead(unsigned threads, uint64_t max_bytes_queued)
    : threads_(std::max(1u, threads)), max_bytes_(max_bytes_queued) {}

PageCacheAhead::~PageCacheAhead() {
  std::deque<Range> dropped;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    dropped.swap(queue_);
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
  for (const Range& r : dropped) {  // never read: their waiters go on, and read alone
    if (r.lead) r.lead();
    if (r.done) r.done();
  }
}

bool PageCacheAhead::Queue(int fd, uint64_t offset, uint64_t length, uint64_t first,
                           std::function<void()> lead, std::function<void()> done) {
  if (length == 0) return false;
  {
    std::lock_guard lock(mu_);
    if (stop_ || bytes_ + length > max_bytes_) return false;
    bytes_ += length;
    queue_.push_back({fd, offset, length, first, std::move(lead), std::move(done)});
    while (workers_.size() < threads_) workers_.emplace_back([this] { Loop(); });
  }
  wake_.notify_one();
  return true;
}

uint64_t PageCacheAhead::bytes_read() const {
  std::lock_guard lock(mu_);
  return read_;
}

void PageCacheAhead::Loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Range range = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    Read(range);
    lock.lock();
    bytes_ -= range.length;
    read_ += range.length;
    lock.unlock();
    // Counted first: whoever the callback wakes sees the range read.
    if (range.done) range.done();
    lock.lock();
  }
}

// The 2 MiB holding `first`, then the rest: a reader waits on the first.
void PageCacheAhead::Read(const Range& r) {
  const long page = sysconf(_SC_PAGESIZE);
  const uint64_t base = r.offset / static_cast<uint64_t>(page) * static_cast<uint64_t>(page);
  const uint64_t end = r.offset + r.length;
  void* mapped = mmap(nullptr, end - base, PROT_READ, MAP_SHARED, r.fd, static_cast<off_t>(base));
  if (mapped == MAP_FAILED) {
    PreadInto(r.fd, r.offset, r.length);
    if (r.lead) r.lead();
    return;
  }
  char* map = static_cast<char*>(mapped);
  madvise(map, end - base, MADV_HUGEPAGE);  // a hint: 4 KiB pages where it is refused
  madvise(map, end - base, MADV_RANDOM);    // nothing read past the range
  const uint64_t lead = std::clamp(r.first, r.offset, end - 1) / kFolio * kFolio;
  const uint64_t lead_from = std::max(lead, r.offset), lead_to = std::min(lead + kFolio, end);
  bool done = Populate(map, base, lead_from, lead_to);
  if (r.lead) r.lead();  // its reader goes on while the rest comes
  done = done && Populate(map, base, lead_to, end) && Populate(map, base, r.offset, lead_from);
  munmap(mapped, end - base);
  if (!done) PreadInto(r.fd, r.offset, r.length);
}

}  // namespace gpufs
