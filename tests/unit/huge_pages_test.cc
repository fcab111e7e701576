#include "base/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace gpufs {
namespace {

bool Mapped(const void* p, size_t bytes) {
  std::vector<unsigned char> pages(bytes / static_cast<size_t>(sysconf(_SC_PAGESIZE)) + 1);
  return mincore(const_cast<void*>(p), bytes, pages.data()) == 0 || errno != ENOMEM;
}

TEST(HugePages, MapHugeAlignedStartsOnA2MiBBoundaryAndHoldsWhatItSays) {
  for (size_t bytes : {size_t{4096}, size_t{3} << 20, (size_t{5} << 20) + 12288}) {
    void* p = MapHugeAligned(bytes);
    ASSERT_NE(p, MAP_FAILED);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePage, 0u) << bytes;
    std::memset(p, 0x5a, bytes);  // every byte asked for is there to write
    EXPECT_EQ(static_cast<unsigned char*>(p)[bytes - 1], 0x5a);
    ASSERT_EQ(munmap(p, bytes), 0);
    EXPECT_FALSE(Mapped(p, bytes)) << "the trimmed ends or the range stayed mapped";
  }
}

TEST(HugePages, ABufferRoundsToPagesAndIsUnmappedWhenItGoes) {
  char* at = nullptr;
  {
    HugePageBuffer buffer((size_t{3} << 20) + 1);
    ASSERT_NE(buffer.data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % kHugePage, 0u);
    EXPECT_EQ(buffer.size(), (size_t{3} << 20) + static_cast<size_t>(sysconf(_SC_PAGESIZE)));
    std::memset(buffer.data(), 1, buffer.size());
    at = buffer.data();
    EXPECT_TRUE(Mapped(at, buffer.size()));
  }
  EXPECT_FALSE(Mapped(at, size_t{3} << 20));
}

TEST(HugePages, AMovedBufferIsOwnedOnceAndAnEmptyOneHoldsNothing) {
  HugePageBuffer a(1 << 20);
  char* data = a.data();
  HugePageBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), data);
  HugePageBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(HugePageBuffer(0).data(), nullptr);
}

}  // namespace
}  // namespace gpufs
