// Staging groups into the disk tier: what is in flight at once, what goes first, what a
// failure leaves behind, and what a full tier does.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "cache/tier_staging.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

constexpr size_t kBlock = 16 << 10;
constexpr size_t kGroupBytes = 8 * kBlock;  // a group is one blob of eight blocks

std::string BlobBytes(uint32_t blob) {
  std::string bytes(kGroupBytes, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>('a' + (blob * 7 + i) % 26);
  return bytes;
}

// A source of one blob per group that holds every read until the test answers it.
class HeldBlobs : public BlobSource {
 public:
  explicit HeldBlobs(uint32_t blobs) {
    for (uint32_t b = 0; b < blobs; ++b) blobs_.push_back(BlobBytes(b));
  }
  std::string_view kind() const override { return "held"; }
  size_t blob_count() const override { return blobs_.size(); }
  std::string Describe(uint32_t b) const override { return "held://" + std::to_string(b); }
  const BlobInfo* Expected(uint32_t) const override { return nullptr; }
  nlohmann::json Stats() const override { return {{source_stat::kKind, "held"}}; }
  void Submit(ReadKind, std::vector<BlobRead> reads) override {
    std::lock_guard lock(mu_);
    for (BlobRead& r : reads) {
      sent_.push_back({r.blob, r.offset, r.urgent});
      held_.push_back(std::move(r));
    }
    changed_.notify_all();
  }

  struct Request {
    uint32_t blob;
    uint64_t offset;
    bool urgent;
  };
  // Waits until `n` reads in all were sent; every read sent so far.
  std::vector<Request> Sent(size_t n) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return sent_.size() >= n; });
    return sent_;
  }
  bool IsHeld(uint32_t blob, uint64_t offset) {
    std::lock_guard lock(mu_);
    return std::any_of(held_.begin(), held_.end(),
                       [&](const BlobRead& r) { return r.blob == blob && r.offset == offset; });
  }
  size_t held() {
    std::lock_guard lock(mu_);
    return held_.size();
  }
  // The blobs with reads held now.
  std::set<uint32_t> HeldBlobIds() {
    std::lock_guard lock(mu_);
    std::set<uint32_t> ids;
    for (const BlobRead& r : held_) ids.insert(r.blob);
    return ids;
  }
  // Answers the held read of `blob` at `offset`: its bytes, or `error`.
  void Answer(uint32_t blob, uint64_t offset, int error = 0) {
    BlobRead read;
    {
      std::lock_guard lock(mu_);
      auto it = std::find_if(held_.begin(), held_.end(), [&](const BlobRead& r) {
        return r.blob == blob && r.offset == offset;
      });
      ASSERT_NE(it, held_.end()) << "no read held of blob " << blob << " at " << offset;
      read = std::move(*it);
      held_.erase(it);
    }
    if (error) return read.done(Fail(error, "cannot read held://{}: injected", blob));
    std::memcpy(read.buffer, blobs_[blob].data() + read.offset, read.length);
    read.done(read.length);
  }
  // Answers every held read, and those they lead to, until none is held.
  void AnswerAll(int error = 0) {
    for (;;) {
      BlobRead* next = nullptr;
      uint32_t blob = 0;
      uint64_t offset = 0;
      {
        std::lock_guard lock(mu_);
        if (held_.empty()) return;
        next = &held_.front();
        blob = next->blob;
        offset = next->offset;
      }
      Answer(blob, offset, error);
    }
  }

 private:
  std::vector<std::string> blobs_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<BlobRead> held_;
  std::vector<Request> sent_;
};

class TierStagingTest : public ::testing::Test {
 protected:
  void Make(uint32_t groups, StagingOptions options, uint64_t tier_bytes = 0) {
    source_ = std::make_unique<HeldBlobs>(groups);
    auto tier = DiskTier::Open(DiskTierOptions{dir_.path(), "s-0123456789abcdef", tier_bytes, 0});
    ASSERT_TRUE(tier.ok()) << tier.error().message;
    tier_ = std::move(*tier);
    std::vector<StagedSpan> spans;
    for (uint32_t g = 0; g < groups; ++g) {
      spans.push_back(StagedSpan{g, 0, kGroupBytes, kGroupBytes,
                                 TierFileName(g, "held", "v1", 0, kGroupBytes)});
    }
    names_.clear();
    for (const StagedSpan& s : spans) names_.push_back(s.name);
    stager_ = std::make_unique<TierStager>(*source_, *tier_, std::move(spans), options, nullptr,
                                           &fetched_);
  }
  static StagingOptions Options(size_t budget_groups, unsigned reads_in_flight) {
    StagingOptions o;
    o.budget = budget_groups * kGroupBytes;
    o.block = kBlock;
    o.piece = 2 * kBlock;
    o.reads_in_flight = reads_in_flight;
    o.writers = 1;
    o.retry_after = std::chrono::milliseconds(0);
    return o;
  }
  // Waits until the stager has written `group` to the tier (or given it up).
  void WaitStaged(uint32_t group) {
    while (stager_->Staging(group)) std::this_thread::yield();
  }
  bool Kept(uint32_t group) {
    std::string back(kGroupBytes, '\0');
    return tier_->ReadSlice(names_[group], 0, kGroupBytes, back.data()) && back == BlobBytes(group);
  }

  TempDir dir_;
  std::unique_ptr<HeldBlobs> source_;
  std::unique_ptr<DiskTier> tier_;
  std::unique_ptr<TierStager> stager_;
  std::vector<std::string> names_;
  std::atomic<uint64_t> fetched_{0};
};

TEST_F(TierStagingTest, BytesInFlightStayWithinTheBudgetAndEveryGroupIsKept) {
  Make(6, Options(2, 64));
  for (uint32_t g = 0; g < 6; ++g) EXPECT_TRUE(stager_->Stage(g));
  source_->Sent(8);  // two groups of four pieces
  EXPECT_EQ(source_->HeldBlobIds(), (std::set<uint32_t>{0, 1}));
  EXPECT_LE(stager_->Stats()[staging_stat::kInFlight].get<uint64_t>(), 2 * kGroupBytes);
  EXPECT_EQ(stager_->Stats()[staging_stat::kQueued], 4);
  // Answered one read at a time: never more than the budget's worth of groups at once.
  while (stager_->Stats()[staging_stat::kStaged] < 6) {
    const auto ids = source_->HeldBlobIds();
    EXPECT_LE(ids.size(), 2u);
    EXPECT_LE(stager_->Stats()[staging_stat::kInFlight].get<uint64_t>(), 2 * kGroupBytes);
    if (ids.empty()) {
      std::this_thread::yield();  // a write is going out; the next group starts after it
      continue;
    }
    for (const auto& s : source_->Sent(0)) {
      if (ids.count(s.blob) && source_->IsHeld(s.blob, s.offset)) {
        source_->Answer(s.blob, s.offset);
        break;
      }
    }
  }
  for (uint32_t g = 0; g < 6; ++g) {
    WaitStaged(g);
    EXPECT_TRUE(Kept(g)) << "group " << g;
  }
  EXPECT_EQ(stager_->Stats()[staging_stat::kStaged], 6);
  EXPECT_EQ(fetched_.load(), 6 * kGroupBytes);
}

TEST_F(TierStagingTest, AReaderIsServedByAnUrgentReadOfItsBlocksBeforeTheGroupLands) {
  Make(1, Options(1, 1));
  ASSERT_TRUE(stager_->Stage(0));
  source_->Sent(1);  // the window of one prefetch read: blocks 0-1
  const std::string blob = BlobBytes(0);
  std::string got(3000, '\0');
  const uint64_t at = 5 * kBlock + 100;  // in block 5
  auto reader =
      std::async(std::launch::async, [&] { return stager_->Read(0, at, got.size(), got.data()); });
  const auto sent = source_->Sent(2);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[1].offset, 5 * kBlock);
  EXPECT_TRUE(sent[1].urgent);
  EXPECT_FALSE(sent[0].urgent);
  source_->Answer(0, 5 * kBlock);
  ASSERT_TRUE(reader.get());  // the prefetch read is still held
  EXPECT_EQ(got, blob.substr(at, got.size()));
  EXPECT_EQ(stager_->Stats()[staging_stat::kDemandReads], 1);
  source_->AnswerAll();
  WaitStaged(0);
  EXPECT_TRUE(Kept(0));
  EXPECT_EQ(fetched_.load(), kGroupBytes);  // block 5 was not read twice
  const nlohmann::json stats = stager_->Stats();
  EXPECT_EQ(stats[staging_stat::kServed], 1);
  EXPECT_EQ(stats[staging_stat::kFetchedBytes], kGroupBytes);
  EXPECT_EQ(stats[staging_stat::kStaged], 1);
  EXPECT_EQ(stats[staging_stat::kFailed], 0);
  EXPECT_EQ(stats[staging_stat::kNotKept], 0);
  EXPECT_EQ(stats[staging_stat::kFullSkips], 0);
  EXPECT_EQ(stats[staging_stat::kQueued], 0);
  EXPECT_EQ(stats[staging_stat::kBudget], kGroupBytes);
  EXPECT_EQ(stats.size(), 10u);  // each key once, none more
}

TEST_F(TierStagingTest, AReaderJoinsAReadInFlightInsteadOfRepeatingIt) {
  Make(1, Options(1, 1));
  ASSERT_TRUE(stager_->Stage(0));
  source_->Sent(1);  // blocks 0-1
  std::string got(100, '\0');
  auto reader =
      std::async(std::launch::async, [&] { return stager_->Read(0, 10, 100, got.data()); });
  source_->Answer(0, 0);
  ASSERT_TRUE(reader.get());
  EXPECT_EQ(got, BlobBytes(0).substr(10, 100));
  EXPECT_EQ(stager_->Stats()[staging_stat::kDemandReads], 0);
  source_->AnswerAll();
}

TEST_F(TierStagingTest, NoGroupIsFetchedTwiceAtOnce) {
  Make(1, Options(4, 64));
  EXPECT_TRUE(stager_->Stage(0));
  EXPECT_TRUE(stager_->Stage(0));
  source_->AnswerAll();
  WaitStaged(0);
  EXPECT_EQ(source_->Sent(0).size(), 4u);  // four pieces of two blocks, once
  EXPECT_EQ(fetched_.load(), kGroupBytes);
  EXPECT_TRUE(Kept(0));
}

TEST_F(TierStagingTest, AFailedStagingFailsItsReadersAndTheGroupIsStagedAgainLater) {
  Make(1, Options(1, 64));
  ASSERT_TRUE(stager_->Stage(0));
  source_->Sent(4);
  std::string got(100, '\0');
  auto reader =
      std::async(std::launch::async, [&] { return stager_->Read(0, 6 * kBlock, 100, got.data()); });
  source_->Answer(0, 6 * kBlock, EIO);
  EXPECT_FALSE(reader.get());  // read elsewhere, never the staging's bytes
  source_->AnswerAll();
  WaitStaged(0);
  EXPECT_FALSE(tier_->Present(names_[0]));
  EXPECT_EQ(stager_->Stats()[staging_stat::kFailed], 1);
  ASSERT_TRUE(stager_->Stage(0));  // a later miss
  source_->AnswerAll();
  WaitStaged(0);
  EXPECT_TRUE(Kept(0));
}

TEST_F(TierStagingTest, AGroupThatFailedIsNotStagedAgainAtOnce) {
  StagingOptions options = Options(1, 64);
  options.retry_after = std::chrono::hours(1);
  Make(1, options);
  ASSERT_TRUE(stager_->Stage(0));
  source_->AnswerAll(EIO);
  WaitStaged(0);
  EXPECT_FALSE(stager_->Stage(0));  // backing off: the member is read alone meanwhile
  EXPECT_EQ(source_->held(), 0u);
}

TEST_F(TierStagingTest, AFullTierStopsStagingBeforeFetchingAndKeepsWhatItHas) {
  const uint64_t copy = 4096 + kGroupBytes;  // header and payload
  Make(4, Options(1, 64), 2 * copy);
  for (uint32_t g = 0; g < 3; ++g) {
    ASSERT_TRUE(stager_->Stage(g));
    source_->AnswerAll();
    WaitStaged(g);
  }
  EXPECT_TRUE(Kept(0));
  EXPECT_TRUE(Kept(1));
  EXPECT_FALSE(tier_->Present(names_[2]));  // no room claimed for it: never fetched
  EXPECT_EQ(fetched_.load(), 2 * kGroupBytes);
  EXPECT_TRUE(tier_->Full());
  EXPECT_FALSE(stager_->Stage(3));  // not even queued
  EXPECT_EQ(source_->held(), 0u);
  EXPECT_EQ(stager_->Stats()[staging_stat::kFullSkips], 2);
  EXPECT_EQ(stager_->Stats()[staging_stat::kNotKept], 0);
}

TEST_F(TierStagingTest, AFailedStagingGivesBackTheRoomItClaimed) {
  const uint64_t copy = 4096 + kGroupBytes;
  Make(2, Options(1, 64), 1 * copy);
  ASSERT_TRUE(stager_->Stage(0));
  source_->AnswerAll(EIO);
  WaitStaged(0);
  EXPECT_EQ(tier_->Stats()[tier_stat::kUsed], 0);
  ASSERT_TRUE(stager_->Stage(1));
  source_->AnswerAll();
  WaitStaged(1);
  EXPECT_TRUE(Kept(1));
}

// Many readers over a source with latency: every byte served is the blob's, and every
// group ends on disk.
class LatentBlobs : public BlobSource {
 public:
  explicit LatentBlobs(uint32_t blobs) {
    for (uint32_t b = 0; b < blobs; ++b) blobs_.push_back(BlobBytes(b));
  }
  ~LatentBlobs() override {
    for (std::thread& t : threads_) t.join();
  }
  std::string_view kind() const override { return "latent"; }
  size_t blob_count() const override { return blobs_.size(); }
  std::string Describe(uint32_t b) const override { return "latent://" + std::to_string(b); }
  const BlobInfo* Expected(uint32_t) const override { return nullptr; }
  nlohmann::json Stats() const override { return {{source_stat::kKind, "latent"}}; }
  void Submit(ReadKind, std::vector<BlobRead> reads) override {
    std::lock_guard lock(mu_);
    for (BlobRead& r : reads) {
      const auto delay = std::chrono::microseconds(200 + random_() % 800);
      threads_.emplace_back([this, r = std::move(r), delay] {
        std::this_thread::sleep_for(delay);
        std::memcpy(r.buffer, blobs_[r.blob].data() + r.offset, r.length);
        r.done(r.length);
      });
    }
  }

 private:
  std::vector<std::string> blobs_;
  std::mutex mu_;
  std::minstd_rand random_{11};
  std::vector<std::thread> threads_;
};

TEST(TierStaging, ReadersOfStagingGroupsGetExactBytes) {
  TempDir dir;
  constexpr uint32_t kGroups = 12;
  LatentBlobs source(kGroups);
  auto tier = DiskTier::Open(DiskTierOptions{dir.path(), "l-0123456789abcdef", 0, 0});
  ASSERT_TRUE(tier.ok());
  std::vector<StagedSpan> spans;
  for (uint32_t g = 0; g < kGroups; ++g) {
    spans.push_back(StagedSpan{g, 0, kGroupBytes, kGroupBytes,
                               TierFileName(g, "latent", "v1", 0, kGroupBytes)});
  }
  StagingOptions options;
  options.budget = 3 * kGroupBytes;
  options.block = kBlock;
  options.piece = 2 * kBlock;
  options.reads_in_flight = 2;
  TierStager stager(source, **tier, spans, options, nullptr);
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0}, served{0};
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::minstd_rand random(t);
      for (int i = 0; i < 60; ++i) {
        const uint32_t g = random() % kGroups;
        const uint64_t at = random() % (kGroupBytes - 5000);
        std::string got(5000, '\0');
        stager.Stage(g);
        if (stager.Read(g, at, got.size(), got.data())) {
          ++served;
          wrong += got != BlobBytes(g).substr(at, got.size());
        }
      }
    });
  }
  for (std::thread& t : readers) t.join();
  for (uint32_t g = 0; g < kGroups; ++g) {
    stager.Stage(g);
    while (stager.Staging(g)) std::this_thread::yield();
    EXPECT_TRUE((*tier)->Present(spans[g].name)) << "group " << g;
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(served.load(), 0);
}

}  // namespace
}  // namespace gpufs
