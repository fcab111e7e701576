#include "fs/page_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace gpufs {
namespace {

// Not yet in every libc's headers; the number is the same on all architectures.
#ifndef SYS_cachestat
constexpr long kSysCachestat = 451;
#else
constexpr long kSysCachestat = SYS_cachestat;
#endif

struct CachestatRange {
  uint64_t off;
  uint64_t len;  // 0: to the end of the file
};

struct Cachestat {
  uint64_t nr_cache;
  uint64_t nr_dirty;
  uint64_t nr_writeback;
  uint64_t nr_evicted;
  uint64_t nr_recently_evicted;
};

// Cleared on the first ENOSYS so that older kernels pay for the probe once.
std::atomic<bool> have_cachestat{true};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

bool CountWithCachestat(int fd, KernelPages& out) {
  if (!have_cachestat.load(std::memory_order_relaxed)) return false;
  CachestatRange range{0, 0};
  Cachestat stat{};
  if (syscall(kSysCachestat, fd, &range, &stat, 0) != 0) {
    if (errno == ENOSYS) have_cachestat.store(false, std::memory_order_relaxed);
    return false;
  }
  out.resident = std::min(stat.nr_cache, out.total);
  return true;
}

Status CountWithMincore(int fd, uint64_t size, const std::string& path, bool per_page,
                        KernelPages& out) {
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return Fail(errno, "cannot map {}: {}", path, strerror(errno));
  const long page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> vec((size + page - 1) / page);
  const int rc = mincore(map, size, vec.data());
  const int saved = errno;
  munmap(map, size);
  if (rc != 0) return Fail(saved, "cannot ask the kernel about {}: {}", path, strerror(saved));
  // mincore speaks in the system's pages.
  const uint64_t per = static_cast<uint64_t>(page) / kStatPageSize;
  if (per_page) out.pages.assign(out.total, false);
  out.resident = 0;
  for (uint64_t p = 0; p < out.total; ++p) {
    const bool in = vec[p / per] & 1;
    out.resident += in;
    if (per_page) out.pages[p] = in;
  }
  return Ok{};
}

}  // namespace

Result<KernelPages> KernelPagesOf(const std::string& path, bool per_page) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) return Fail(errno, "cannot open {}: {}", path, strerror(errno));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Fail(errno, "cannot stat {}: {}", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return Fail(EINVAL, "cannot measure {}: not a regular file", path);
  KernelPages out;
  out.total = PagesOf(static_cast<uint64_t>(st.st_size));
  if (out.total == 0) return out;
  if (!per_page && CountWithCachestat(fd.get(), out)) return out;
  if (Status s = CountWithMincore(fd.get(), static_cast<uint64_t>(st.st_size), path, per_page, out);
      !s) {
    return s.error();
  }
  return out;
}

}  // namespace gpufs
