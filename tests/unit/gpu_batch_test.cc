#include "gpu/batch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <thread>

#include "tests/unit/temp_dir.h"

namespace gpufs::gpu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

MemberLocation At(const std::string& blob, uint64_t offset, uint64_t size) {
  return MemberLocation{blob + "@" + std::to_string(offset), blob, offset, size};
}

TEST(PlanBatch, GroupsByBlobAndJoinsNearbyMembersIntoRuns) {
  PlanOptions options;
  options.max_gap = 100;
  options.align = 64;
  const BatchPlan plan = PlanBatch(
      {At("b", 5000, 10), At("a", 300, 50), At("a", 0, 200), At("b", 0, 10), At("a", 400, 1)},
      options);
  EXPECT_THAT(plan.blobs, ElementsAre("b", "a"));
  ASSERT_EQ(plan.runs.size(), 3u);
  EXPECT_EQ(plan.runs[0].blob, 0u);  // b@0 alone: b@5000 is too far
  EXPECT_THAT(plan.runs[0].members, ElementsAre(3));
  EXPECT_THAT(plan.runs[1].members, ElementsAre(0));
  EXPECT_EQ(plan.runs[2].blob, 1u);  // a@0, a@300, a@400 within 100 bytes of each other
  EXPECT_EQ(plan.runs[2].offset, 0u);
  EXPECT_EQ(plan.runs[2].size, 401u);
  EXPECT_THAT(plan.runs[2].members, ElementsAre(2, 1, 4));
  // Output keeps the batch's order, each member aligned.
  EXPECT_THAT(plan.destination, ElementsAre(0, 64, 128, 384, 448));
  EXPECT_EQ(plan.output_bytes, 512u);
  EXPECT_EQ(plan.read_bytes, 10u + 10u + 401u);
}

TEST(PlanBatch, StartsANewRunAtTheLongestRun) {
  PlanOptions options;
  options.max_run = 250;
  const BatchPlan plan =
      PlanBatch({At("a", 0, 100), At("a", 100, 100), At("a", 200, 100)}, options);
  ASSERT_EQ(plan.runs.size(), 2u);
  EXPECT_EQ(plan.runs[0].size, 200u);
  EXPECT_EQ(plan.runs[1].offset, 200u);
}

// Two blobs of patterned bytes; members are read back through a host stager.
class BatchReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"blob-0", "blob-1"}) {
      std::string bytes(300000, '\0');
      for (size_t i = 0; i < bytes.size(); ++i)
        bytes[i] = static_cast<char>((i * 7 + name[5]) % 251);
      std::ofstream(Path(name), std::ios::binary) << bytes;
      blobs_[name] = bytes;
    }
  }
  std::string Path(const std::string& name) { return (dir_.path() / name).string(); }
  MemberLocation Member(const std::string& blob, uint64_t offset, uint64_t size) {
    return MemberLocation{blob, Path(blob), offset, size};
  }

  Result<DeviceBatch> ReadWith(size_t buffer_bytes, std::vector<MemberLocation> members) {
    ReaderOptions options;
    options.buffer_bytes = buffer_bytes;
    options.buffers = 3;
    auto reader = BatchReader::Create(*stager_, options);
    EXPECT_TRUE(reader.ok());
    auto batch = (*reader)->Read(std::move(members));
    counters_ = (*reader)->counters();
    return batch;
  }

  // ReadWith on another thread; a batch that does not return in time fails the test and
  // ends the run, since a hung read would otherwise stall the whole suite.
  Result<DeviceBatch> ReadWithin(std::chrono::seconds limit, std::vector<MemberLocation> members) {
    auto result = std::make_shared<std::promise<Result<DeviceBatch>>>();
    std::future<Result<DeviceBatch>> done = result->get_future();
    std::thread([this, result, members = std::move(members)]() mutable {
      result->set_value(ReadWith(1 << 20, std::move(members)));
    }).detach();
    if (done.wait_for(limit) != std::future_status::ready) {
      ADD_FAILURE() << "the batch did not return within " << limit.count() << " s";
      std::fflush(stdout);
      std::_Exit(1);
    }
    return done.get();
  }

  void ExpectBytes(const DeviceBatch& batch) {
    for (size_t i = 0; i < batch.count(); ++i) {
      const MemberLocation& m = batch.plan().members[i];
      std::string got(batch.size(i), '\0');
      ASSERT_TRUE(stager_->CopyToHost(got.data(), batch.data(i), got.size()).ok());
      EXPECT_EQ(got, blobs_[m.path].substr(m.offset, m.size)) << m.path << "@" << m.offset;
    }
  }

  TempDir dir_;
  std::map<std::string, std::string> blobs_;
  std::unique_ptr<Stager> stager_ = MakeHostStager();
  ReaderCounters counters_;
};

TEST_F(BatchReaderTest, ReadsEachMemberByteExactInBatchOrder) {
  auto batch = ReadWith(1 << 20, {Member("blob-1", 1000, 110000), Member("blob-0", 5, 7),
                                  Member("blob-0", 20, 100), Member("blob-1", 0, 999)});
  ASSERT_TRUE(batch.ok()) << batch.error().message;
  ExpectBytes(*batch);
  EXPECT_EQ(counters_.pieces, 2u);  // one run per blob
  EXPECT_EQ(counters_.copies, 4u);
}

TEST_F(BatchReaderTest, SplitsRunsLargerThanAStagingBufferIntoPieces) {
  // 4 KiB buffers: members straddle pieces and come out in several copies each.
  auto batch = ReadWith(4096, {Member("blob-0", 100, 50000), Member("blob-0", 50100, 9000),
                               Member("blob-1", 4095, 2)});
  ASSERT_TRUE(batch.ok()) << batch.error().message;
  ExpectBytes(*batch);
  EXPECT_EQ(counters_.bytes_read, 59000u + 2u);
  EXPECT_EQ(counters_.pieces, 15u + 1u);  // ceil(59000 / 4096) for blob-0's run
  EXPECT_GT(counters_.copies, counters_.pieces - 1);
}

TEST_F(BatchReaderTest, NamesAMissingOrShortBlob) {
  auto missing = ReadWith(1 << 20, {MemberLocation{"x", Path("gone"), 0, 10}});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message, HasSubstr("cannot open blob " + Path("gone")));
  auto beyond = ReadWith(1 << 20, {Member("blob-0", 299990, 100)});
  ASSERT_FALSE(beyond.ok());
  EXPECT_THAT(beyond.error().message, HasSubstr("blob ends early"));
}

TEST_F(BatchReaderTest, FailsNamingTheMissingBlobWhenTheSecondOfTwoIsGone) {
  auto batch = ReadWithin(std::chrono::seconds(30),
                          {Member("blob-0", 0, 100), MemberLocation{"y", Path("gone"), 0, 10}});
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.error().message, HasSubstr(Path("gone")));
}

TEST_F(BatchReaderTest, FailsNamingTheMissingBlobWhenTheFirstOfTwoIsGone) {
  auto batch = ReadWithin(std::chrono::seconds(30),
                          {MemberLocation{"y", Path("gone"), 0, 10}, Member("blob-0", 0, 100)});
  ASSERT_FALSE(batch.ok());
  EXPECT_THAT(batch.error().message, HasSubstr(Path("gone")));
}

TEST_F(BatchReaderTest, ReadsAgainAfterAFailedBatchAndABlobNamedLater) {
  ReaderOptions options;
  options.buffers = 2;
  auto reader = BatchReader::Create(*stager_, options);
  ASSERT_TRUE(reader.ok());
  ASSERT_FALSE((*reader)->Read({MemberLocation{"y", Path("gone"), 0, 10}}).ok());
  auto first = (*reader)->Read({Member("blob-0", 10, 1000)});
  ASSERT_TRUE(first.ok()) << first.error().message;
  ExpectBytes(*first);
  auto both = (*reader)->Read({Member("blob-1", 7, 5000), Member("blob-0", 20000, 3)});
  ASSERT_TRUE(both.ok()) << both.error().message;
  ExpectBytes(*both);
}

TEST_F(BatchReaderTest, RefusesAFileOffAnyGpufsMount) {
  auto located = LocateMember(Path("blob-0"));
  ASSERT_FALSE(located.ok());
  EXPECT_THAT(located.error().message, HasSubstr("not a file of a gpufs mount"));
}

TEST_F(BatchReaderTest, DeviceStagerReadsTheSameBytesOrSaysWhyThereIsNoGpu) {
  std::unique_ptr<Stager> device = MakeDeviceStager();
  if (!device->on_device()) {
    EXPECT_FALSE(device->description().empty());
    EXPECT_EQ(device->AllocateDevice(16).error().code, ENOTSUP);
    GTEST_SKIP() << "no GPU here: " << device->description();
  }
  stager_ = std::move(device);
  auto batch = ReadWith(64 << 10, {Member("blob-1", 7, 200000), Member("blob-0", 3, 9)});
  ASSERT_TRUE(batch.ok()) << batch.error().message;
  ExpectBytes(*batch);
}

}  // namespace
}  // namespace gpufs::gpu
