// Ranges read into the kernel's page cache in the background (source/page_cache_ahead.h):
// what the page cache holds afterwards, asked of the kernel (mincore), not assumed.
#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include "fs/page_cache.h"
#include "source/page_cache_ahead.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

constexpr long kTmpfsMagic = 0x01021994;

// A file of `bytes` written out and let go from the page cache, or empty where the folder
// is in memory (tmpfs keeps every page: nothing to read ahead).
std::string ColdFile(const TempDir& dir, size_t bytes) {
  struct statfs fs {};
  if (statfs(dir.path().c_str(), &fs) != 0 || fs.f_type == kTmpfsMagic) return {};
  const std::string path = dir.path() / "blob";
  std::ofstream(path) << std::string(bytes, 'g');
  const int fd = open(path.c_str(), O_RDONLY);
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  return path;
}

struct Calls {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> seen;
  std::function<void()> Note(std::string what) {
    return [this, what] {
      std::lock_guard lock(mu);
      seen.push_back(what);
      cv.notify_all();
    };
  }
  void AwaitCount(size_t n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return seen.size() >= n; });
  }
};

TEST(PageCacheAhead, ReadsTheRangeIntoThePageCacheTheLeadFirst) {
  TempDir dir;
  const std::string path = ColdFile(dir, 3 << 20);
  if (path.empty()) GTEST_SKIP() << dir.path() << " is on tmpfs";
  const KernelPages before = *KernelPagesOf(path, false);
  ASSERT_LT(before.resident, before.total / 2) << "the page cache kept the file written";
  const int fd = open(path.c_str(), O_RDONLY);
  Calls calls;
  {
    PageCacheAhead ahead(2, 64 << 20);
    ASSERT_TRUE(
        ahead.Queue(fd, 4096, (3 << 20) - 4096, 2 << 20, calls.Note("lead"), calls.Note("done")));
    calls.AwaitCount(2);
    EXPECT_EQ(ahead.bytes_read(), (3u << 20) - 4096);
  }
  EXPECT_EQ(calls.seen, (std::vector<std::string>{"lead", "done"}));
  const KernelPages after = *KernelPagesOf(path, false);
  EXPECT_GE(after.resident, after.total - 1);  // the first page was not asked for
  close(fd);
}

TEST(PageCacheAhead, RefusesMoreThanItsBoundAndCallsBackWhatItDrops) {
  TempDir dir;
  const std::string path = dir.path() / "blob";
  std::ofstream(path) << std::string(1 << 20, 'g');
  const int fd = open(path.c_str(), O_RDONLY);
  Calls calls;
  {
    PageCacheAhead ahead(1, 1 << 20);
    EXPECT_FALSE(ahead.Queue(fd, 0, (1 << 20) + 1, 0, calls.Note("refused")));
    EXPECT_FALSE(ahead.Queue(fd, 0, 0, 0, calls.Note("empty")));
    EXPECT_TRUE(ahead.Queue(fd, 0, 1 << 20, 0, nullptr, calls.Note("done")));
  }  // queued or read, its `done` has run once the reader stops
  EXPECT_EQ(calls.seen, std::vector<std::string>{"done"});
  close(fd);
}

}  // namespace
}  // namespace gpufs
