// The shape of local group reads: pieces the blobs' device takes whole.
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>

#include <gtest/gtest.h>

#include <fstream>

#include "source/local_source.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

TEST(DeviceRequestBytes, IsTheQueueLimitOfTheFilesBlockDevice) {
  TempDir dir;
  const auto file = dir.path() / "blob";
  std::ofstream(file) << "x";
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  const auto queue = std::filesystem::path("/sys/dev/block") /
                     (std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)));
  if (!std::filesystem::exists(queue)) {
    GTEST_SKIP() << dir.path() << " is not on a block device (" << queue << " is absent)";
  }
  uint64_t kib = 0;
  std::ifstream(std::filesystem::exists(queue / "queue") ? queue / "queue/max_sectors_kb"
                                                         : queue / "../queue/max_sectors_kb") >>
      kib;
  EXPECT_EQ(DeviceRequestBytes(file), kib << 10);
}

TEST(DeviceRequestBytes, IsZeroOffABlockDeviceOrForAMissingFile) {
  EXPECT_EQ(DeviceRequestBytes("/nonexistent/blob"), 0u);
  struct statfs fs {};
  if (statfs("/proc/self", &fs) == 0) {
    EXPECT_EQ(DeviceRequestBytes("/proc/self/status"), 0u);
  }
}

}  // namespace
}  // namespace gpufs

namespace gpufs {
namespace {

TEST(RequestQueue, TakesUrgentRequestsFirstEachKindInOrder) {
  RequestQueue queue;
  std::vector<IoRequest> batch(4);
  for (size_t i = 0; i < batch.size(); ++i) batch[i].offset = i;
  batch[2].urgent = true;
  batch[3].urgent = true;
  queue.Push(std::move(batch));
  std::vector<uint64_t> order;
  for (IoRequest& r : queue.Take(3, false)) order.push_back(r.offset);
  EXPECT_EQ(order, (std::vector<uint64_t>{2, 3, 0}));
  EXPECT_EQ(queue.Take(8, false).at(0).offset, 1u);
}

}  // namespace
}  // namespace gpufs
