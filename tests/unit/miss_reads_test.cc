// The choice between reading a file alone and reading its group ahead into the page cache
// (cache/miss_reads.h), and what the device under a dataset shows (source/device_shape.h).
#include <gtest/gtest.h>

#include "cache/miss_reads.h"
#include "source/device_shape.h"
#include "source/network_fs.h"

namespace gpufs {
namespace {

// The slow volume of the benchmarks: 120 reads/s, 150 MB/s; ~50 KB files in 4 MiB groups.
MissReadShape ThrottledVolume() {
  return {50e3, 4 << 20, (4 << 20) / 50e3, 1280 << 10, 150e6 / 120};
}

// A solid-state disk: 3 GB/s and 500 k reads/s; ImageNet's ~110 KB files.
MissReadShape FastDisk() { return {110e3, 16 << 20, (16 << 20) / 110e3, 4 << 20, 3e9 / 500e3}; }

TEST(MissReadCost, GroupsPayOnASlowVolumeWhileThePageCacheKeepsThem) {
  const MissReadCost kept = CostOf(ThrottledVolume(), 1.0);
  EXPECT_LT(kept.group * 10, kept.alone);  // a request costs ~25 files' bytes there
  const MissReadCost mostly_lost = CostOf(ThrottledVolume(), 0.01);
  EXPECT_GT(mostly_lost.group, mostly_lost.alone);
}

TEST(MissReadCost, AFastDiskReadsAloneUnlessNearlyAllIsKept) {
  EXPECT_LT(CostOf(FastDisk(), 1.0).group, CostOf(FastDisk(), 1.0).alone);
  EXPECT_GT(CostOf(FastDisk(), 0.8).group, CostOf(FastDisk(), 0.8).alone);
}

TEST(MissReadCost, AFileAloneCostsARequestAndItsBytes) {
  const MissReadCost cost = CostOf(ThrottledVolume(), 0.5);
  EXPECT_DOUBLE_EQ(cost.alone, 150e6 / 120 + 50e3);
  // One file served is the group's cost whole: it is read for that file alone.
  const MissReadShape one{50e3, 4 << 20, 80, 1 << 20, 1e6};
  EXPECT_DOUBLE_EQ(CostOf(one, 0.0).group, (4 << 20) + 4 * 1e6);
}

TEST(PredictedKept, IsWhatThePageCacheHoldsOfTheDatasetBeyondTheBudget) {
  EXPECT_DOUBLE_EQ(PredictedKept(100, 100, 0), 1.0);
  EXPECT_DOUBLE_EQ(PredictedKept(1000, 200, 400), 0.5);
  EXPECT_DOUBLE_EQ(PredictedKept(1000, 200, 4000), 1.0);
  EXPECT_DOUBLE_EQ(PredictedKept(1000, 0, 0), 0.0);
}

TEST(DeviceShape, ReadsAV1ThrottleForItsDeviceOnly) {
  const std::string knob = "7:0 120\n8:16 300\n";
  EXPECT_EQ(ThrottleOf(knob, "8:16"), 300u);
  EXPECT_EQ(ThrottleOf(knob, "7:0"), 120u);
  EXPECT_EQ(ThrottleOf(knob, "7:1"), std::nullopt);
  EXPECT_EQ(ThrottleOf("", "7:1"), std::nullopt);
}

TEST(DeviceShape, ReadsAV2IoMaxLineAndTakesMaxAsNoLimit) {
  const std::string io_max =
      "8:0 rbps=max wbps=max riops=max wiops=100\n"
      "259:0 rbps=157286400 wbps=max riops=120 wiops=max\n";
  EXPECT_EQ(IoMaxOf(io_max, "259:0", "riops"), 120u);
  EXPECT_EQ(IoMaxOf(io_max, "259:0", "rbps"), 157286400u);
  EXPECT_EQ(IoMaxOf(io_max, "8:0", "riops"), std::nullopt);
  EXPECT_EQ(IoMaxOf(io_max, "8:1", "rbps"), std::nullopt);
}

TEST(DeviceShape, ABreakEvenNeedsBothLimits) {
  EXPECT_DOUBLE_EQ(*ThrottledBreakEven(120, 150000000), 1.25e6);
  EXPECT_EQ(ThrottledBreakEven(std::nullopt, 150000000), std::nullopt);
  EXPECT_EQ(ThrottledBreakEven(0, 150000000), std::nullopt);
}

TEST(DeviceShape, FilesInMemoryHaveNoPageCacheToReadInto) {
  EXPECT_EQ(ShapeOf("/dev/shm").kind, DeviceShape::Kind::kMemory);
}

TEST(DefaultTier, PaysOnAKernelNetworkFilesystemOnly) {
  EXPECT_TRUE(SlowerThanLocalDisk(0x6969));       // NFS
  EXPECT_TRUE(SlowerThanLocalDisk(0x0BD00BD0));   // Lustre
  EXPECT_FALSE(SlowerThanLocalDisk(kFuseMagic));  // may be squashfuse
  EXPECT_FALSE(SlowerThanLocalDisk(0xEF53));      // ext4
}

}  // namespace
}  // namespace gpufs
