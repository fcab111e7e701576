#include "base/sizes.h"

#include <gtest/gtest.h>

namespace gpufs {
namespace {

TEST(FormatSize, RoundsInTheLargestUnitAndDropsDecimalsThatSayNothing) {
  EXPECT_EQ(FormatSize(0), "0 B");
  EXPECT_EQ(FormatSize(100), "100 B");
  EXPECT_EQ(FormatSize(1023), "1023 B");
  EXPECT_EQ(FormatSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatSize(512ull << 20), "512 MiB");
  EXPECT_EQ(FormatSize(23'400'000'000ull), "21.8 GiB");
  EXPECT_EQ(FormatSize(150ull << 30), "150 GiB");
  EXPECT_EQ(FormatSize(3ull << 50), "3 PiB");
  EXPECT_EQ(FormatSize(5000ull << 50), "5000 PiB");
}

TEST(FormatSize, KeepsItsDecimalsUpToTheLargestUnitAsked) {
  const SizeStyle tenths{.largest = SizeScale::kTera, .trim = false};
  EXPECT_EQ(FormatSize(100, tenths), "100.0 B");
  EXPECT_EQ(FormatSize(512ull << 20, tenths), "512.0 MiB");
  EXPECT_EQ(FormatSize(2048ull << 40, tenths), "2048.0 TiB");
}

TEST(FormatSize, WritesOneUnitRoundedToTheNearestOrUp) {
  const SizeStyle nearest{.unit = SizeScale::kMega, .decimals = 0, .separator = ""};
  EXPECT_EQ(FormatSize(0, nearest), "0MiB");
  EXPECT_EQ(FormatSize((3ull << 20) + (1 << 19) - 1, nearest), "3MiB");
  EXPECT_EQ(FormatSize(5ull << 30, nearest), "5120MiB");
  const SizeStyle up{.unit = SizeScale::kMega, .rounding = SizeStyle::kUp, .separator = ""};
  EXPECT_EQ(FormatSize(0, up), "0MiB");
  EXPECT_EQ(FormatSize(1, up), "1MiB");
  EXPECT_EQ(FormatSize(3ull << 20, up), "3MiB");
  EXPECT_EQ(FormatSize((3ull << 20) + 1, up), "4MiB");
  EXPECT_EQ(FormatSize(UINT64_MAX, up), "17592186044416MiB");  // no overflow
}

TEST(FormatSize, WritesVmtouchUnitsRoundedDown) {
  const SizeStyle vmtouch{
      .largest = SizeScale::kTera, .rounding = SizeStyle::kDown, .letters = true, .separator = ""};
  EXPECT_EQ(FormatSize(1000, vmtouch), "1000");
  EXPECT_EQ(FormatSize(16384, vmtouch), "16K");
  EXPECT_EQ(FormatSize((2ull << 20) - 1, vmtouch), "1M");
  EXPECT_EQ(FormatSize(3ull << 50, vmtouch), "3072T");
}

TEST(FormatSize, WritesExactSizesInTheUnitThatDividesThem) {
  const SizeStyle exact{.exact = true, .largest = SizeScale::kTera, .separator = ""};
  EXPECT_EQ(FormatSize(0, exact), "0");
  EXPECT_EQ(FormatSize(4ull << 20, exact), "4MiB");
  EXPECT_EQ(FormatSize(1'000'000'000, exact), "1GB");
  EXPECT_EQ(FormatSize(1001, exact), "1001B");
  EXPECT_EQ(FormatSize(1536, exact), "1536B");
  EXPECT_EQ(FormatSize(1ull << 50, exact), "1024TiB");
  EXPECT_EQ(FormatSize(9'007'199'254'740'993ull, exact), "9007199254740993B");
}

}  // namespace
}  // namespace gpufs
