// Group loads read piece by piece: which piece goes when, what a reader may take before
// its group has landed, and what a failed piece leaves behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "cache/group_cache.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;

// A source that holds every read until the test answers it, and says what it was asked.
class HeldSource : public BlobSource {
 public:
  explicit HeldSource(std::string blob) : blob_(std::move(blob)) {}

  std::string_view kind() const override { return "held"; }
  size_t blob_count() const override { return 1; }
  std::string Describe(uint32_t) const override { return "held://blob"; }
  const BlobInfo* Expected(uint32_t) const override { return expected_ ? &*expected_ : nullptr; }
  void Submit(ReadKind, std::vector<BlobRead> reads) override {
    std::lock_guard lock(mu_);
    for (BlobRead& r : reads) held_.push_back(std::move(r));
    submitted_ += reads.size();
    changed_.notify_all();
  }
  nlohmann::json Stats() const override { return {{source_stat::kKind, "held"}}; }

  // Waits until `n` reads in all were submitted; the offsets of those held now.
  std::vector<uint64_t> Held(size_t n) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return submitted_ >= n; });
    std::vector<uint64_t> offsets;
    for (const BlobRead& r : held_) offsets.push_back(r.offset);
    return offsets;
  }
  size_t submitted() {
    std::lock_guard lock(mu_);
    return submitted_;
  }
  // Whether the read held at `offset` was sent as urgent (a reader waits on it).
  bool Urgent(uint64_t offset) {
    std::lock_guard lock(mu_);
    auto it = std::find_if(held_.begin(), held_.end(),
                           [&](const BlobRead& r) { return r.offset == offset; });
    return it != held_.end() && it->urgent;
  }
  // The offsets of the held reads that are not urgent (prefetch).
  std::vector<uint64_t> HeldPrefetch() {
    std::lock_guard lock(mu_);
    std::vector<uint64_t> offsets;
    for (const BlobRead& r : held_) {
      if (!r.urgent) offsets.push_back(r.offset);
    }
    return offsets;
  }
  // Answers the held read at blob offset `offset` with the blob's bytes, or `error`.
  void Answer(uint64_t offset, int error = 0) {
    BlobRead read;
    {
      std::lock_guard lock(mu_);
      auto it = std::find_if(held_.begin(), held_.end(),
                             [&](const BlobRead& r) { return r.offset == offset; });
      ASSERT_NE(it, held_.end()) << "no read held at " << offset;
      read = std::move(*it);
      held_.erase(it);
    }
    if (error) return read.done(Fail(error, "cannot read held://blob: injected"));
    const size_t n = std::min<size_t>(read.length, blob_.size() - read.offset);
    std::memcpy(read.buffer, blob_.data() + read.offset, n);
    read.done(n);
  }

  std::string blob_;
  std::optional<BlobInfo> expected_;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<BlobRead> held_;
  size_t submitted_ = 0;
};

constexpr size_t kPiece = 4096;
constexpr size_t kMember = 3000;

// One group of 3000-byte members in one blob (four unless a test asks for more), read as
// 4096-byte pieces: member 0 lies in piece 0, member 1 in pieces 0-1, member 2 in pieces
// 1-2, member 3 in piece 2.
class GroupLoadsTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeDataset(4); }

  void MakeDataset(uint32_t members) {
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"c"};
    spec.has_checksums = true;
    std::string bytes;
    for (uint32_t m = 0; m < members; ++m) {
      std::string member;
      for (size_t i = 0; i < kMember; ++i) member += static_cast<char>('a' + (m * 7 + i) % 26);
      spec.members.push_back(MemberSpec{"c/" + std::to_string(m), 0, 0, bytes.size(), kMember,
                                        ChecksumOf(member.data(), member.size()), 0});
      bytes += member;
    }
    spec.groups.push_back(GroupSpec{"blob", 0, bytes.size(), 0});
    catalog_ = std::make_unique<Catalog>(std::move(*CatalogFromSpec(spec)));
    source_ = std::make_unique<HeldSource>(bytes);
  }

  void MakeCache(unsigned in_flight, size_t demand_block = 0) {
    arena_ = std::move(*PinnedArena::Create(1 << 20));
    CacheOptions options;
    options.policy = "lru";
    options.prefetch_depth = 0;
    options.io_piece = kPiece;
    options.demand_block = demand_block;
    options.reads_in_flight = in_flight;
    options.adapt_window = false;  // these tests follow the lanes read by read
    cache_ = std::make_unique<GroupCache>(*catalog_, *source_, *arena_, MakePolicy("lru", {4}, 4),
                                          options);
  }

  std::future<Result<std::string>> ReadLater(uint32_t member) {
    return std::async(std::launch::async, [this, member]() -> Result<std::string> {
      auto bytes = cache_->Read(*catalog_->FindPath("c/" + std::to_string(member)), 0, 1 << 20);
      if (!bytes) return bytes.error();
      return std::string(bytes->data(), bytes->size());
    });
  }
  std::string Member(uint32_t m) const { return source_->blob_.substr(m * kMember, kMember); }

  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<HeldSource> source_;
  std::unique_ptr<PinnedArena> arena_;
  std::unique_ptr<GroupCache> cache_;
};

TEST_F(GroupLoadsTest, ServesAMemberOnceItsPieceLandsBeforeTheRestOfTheGroup) {
  MakeCache(1);
  auto reader = ReadLater(3);
  // The demanded member's piece goes at once as an urgent read of its own, beside the
  // window's prefetch of the group's first piece.
  EXPECT_EQ(source_->Held(2), (std::vector<uint64_t>{2 * kPiece, 0}));
  EXPECT_TRUE(source_->Urgent(2 * kPiece));
  EXPECT_FALSE(source_->Urgent(0));
  source_->Answer(2 * kPiece);
  auto got = reader.get();
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(*got, Member(3));
  EXPECT_FALSE(cache_->Resident(0));
  source_->Answer(0);
  EXPECT_EQ(source_->Held(3), std::vector<uint64_t>{kPiece});  // then the rest, in order
  source_->Answer(kPiece);
  EXPECT_EQ(ReadLater(1).get().value(), Member(1));
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_EQ(source_->submitted(), 3u);
  EXPECT_EQ(cache_->counters().demand_reads.load(), 1u);
}

TEST_F(GroupLoadsTest, ADemandReadOvertakesQueuedPrefetchAndAFullWindow) {
  MakeCache(2);
  auto first = ReadLater(0);
  EXPECT_EQ(source_->Held(2), (std::vector<uint64_t>{0, kPiece}));  // demand, prefetch
  // The window (2) is full and piece 2 is queued for prefetch behind it; a reader of
  // member 3 (piece 2) waits for neither.
  auto second = ReadLater(3);
  EXPECT_EQ(source_->Held(3), (std::vector<uint64_t>{0, kPiece, 2 * kPiece}));
  EXPECT_TRUE(source_->Urgent(2 * kPiece));
  source_->Answer(2 * kPiece);
  EXPECT_EQ(second.get().value(), Member(3));
  source_->Answer(0);
  EXPECT_EQ(first.get().value(), Member(0));
  source_->Answer(kPiece);
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_EQ(source_->submitted(), 3u);
}

TEST_F(GroupLoadsTest, ADemandForAPieceAlreadyInFlightJoinsIt) {
  MakeCache(3);
  auto first = ReadLater(0);
  EXPECT_EQ(source_->Held(3).size(), 3u);  // piece 0 demanded, pieces 1-2 prefetched
  auto joined = ReadLater(3);              // piece 2 is in flight: no read of its own
  while (cache_->counters().shared_waits.load() < 1) std::this_thread::yield();
  source_->Answer(2 * kPiece);
  EXPECT_EQ(joined.get().value(), Member(3));
  source_->Answer(0);
  source_->Answer(kPiece);
  EXPECT_EQ(first.get().value(), Member(0));
  EXPECT_EQ(source_->submitted(), 3u);
  EXPECT_EQ(cache_->counters().demand_reads.load(), 1u);
}

TEST_F(GroupLoadsTest, ADemandReadCoversJustTheMembersBlocks) {
  // Blocks of 1024 bytes, prefetch pieces of four blocks: member 2 (bytes 6000-8999) is
  // blocks 5-8, one read of 4096 bytes at 5120; prefetch reads the rest around it.
  MakeCache(1, 1024);
  auto reader = ReadLater(2);
  EXPECT_EQ(source_->Held(2), (std::vector<uint64_t>{5 * 1024, 0}));
  EXPECT_TRUE(source_->Urgent(5 * 1024));
  source_->Answer(5 * 1024);
  EXPECT_EQ(reader.get().value(), Member(2));
  source_->Answer(0);                                            // blocks 0-3
  EXPECT_EQ(source_->Held(3), std::vector<uint64_t>{4 * 1024});  // block 4 alone
  source_->Answer(4 * 1024);
  EXPECT_EQ(source_->Held(4), std::vector<uint64_t>{9 * 1024});  // blocks 9-11
  source_->Answer(9 * 1024);
  EXPECT_TRUE(cache_->Resident(0));
  for (uint32_t m = 0; m < 4; ++m) EXPECT_EQ(ReadLater(m).get().value(), Member(m));
}

TEST_F(GroupLoadsTest, PrefetchKeepsAQuarterOfTheWindowUnderDemand) {
  // 16 members in 12 pieces; a window of 4 reads, of which demand may take all but one.
  MakeDataset(16);
  MakeCache(4);
  auto first = ReadLater(0);  // demand piece 0, prefetch pieces 1-3
  EXPECT_EQ(source_->Held(4), (std::vector<uint64_t>{0, kPiece, 2 * kPiece, 3 * kPiece}));
  // Readers of members in queued pieces 5, 7-8 and 9-10: each goes at once, past the window.
  std::vector<std::future<Result<std::string>>> readers;
  for (uint32_t m : {7u, 10u, 13u}) readers.push_back(ReadLater(m));
  source_->Held(7);
  EXPECT_EQ(source_->HeldPrefetch(), (std::vector<uint64_t>{kPiece, 2 * kPiece, 3 * kPiece}));
  // Prefetch's reads land: with demand holding the window, it keeps one read in flight.
  for (uint64_t p : {1, 2, 3}) source_->Answer(p * kPiece);
  source_->Held(8);
  EXPECT_EQ(source_->HeldPrefetch(), std::vector<uint64_t>{4 * kPiece});
  while (!cache_->Resident(0)) {  // answer everything, as it comes
    for (uint64_t at : source_->Held(0)) source_->Answer(at);
    std::this_thread::yield();
  }
  EXPECT_EQ(source_->submitted(), 10u);  // every piece once: 0-5, 7-8 and 9-10 together
  EXPECT_EQ(first.get().value(), Member(0));
  for (size_t i = 0; i < readers.size(); ++i) {
    EXPECT_EQ(readers[i].get().value(), Member(std::vector<uint32_t>{7, 10, 13}[i]));
  }
  EXPECT_TRUE(cache_->Resident(0));
}

TEST_F(GroupLoadsTest, AFailedDemandReadFailsItsReaderAndTheGroupGoesOn) {
  MakeCache(2);
  auto first = ReadLater(0);
  EXPECT_EQ(source_->Held(2), (std::vector<uint64_t>{0, kPiece}));
  auto failing = ReadLater(3);
  EXPECT_EQ(source_->Held(3), (std::vector<uint64_t>{0, kPiece, 2 * kPiece}));
  source_->Answer(2 * kPiece, EIO);
  auto got = failing.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_THAT(got.error().message, HasSubstr("held://blob"));
  // The reader of member 0 and the rest of the load go on; piece 2 is read again.
  source_->Answer(0);
  EXPECT_EQ(first.get().value(), Member(0));
  EXPECT_EQ(source_->Held(4), (std::vector<uint64_t>{kPiece, 2 * kPiece}));
  EXPECT_FALSE(source_->Urgent(2 * kPiece));
  source_->Answer(kPiece);
  source_->Answer(2 * kPiece);
  EXPECT_EQ(ReadLater(3).get().value(), Member(3));
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_EQ(cache_->counters().io_errors.load(), 1u);
}

TEST_F(GroupLoadsTest, KeepsAtMostReadsInFlight) {
  MakeCache(2);
  auto reader = ReadLater(0);
  EXPECT_EQ(source_->Held(2), (std::vector<uint64_t>{0, kPiece}));
  EXPECT_EQ(source_->submitted(), 2u);
  source_->Answer(kPiece);
  EXPECT_EQ(source_->Held(3), (std::vector<uint64_t>{0, 2 * kPiece}));
  source_->Answer(0);
  source_->Answer(2 * kPiece);
  EXPECT_EQ(reader.get().value(), Member(0));
}

TEST_F(GroupLoadsTest, AFailedPieceFailsItsReadersAndTheGroupGoesOnlyOnceNothingIsInFlight) {
  MakeCache(3);
  auto reader = ReadLater(0);
  EXPECT_EQ(source_->Held(3).size(), 3u);  // piece 0 demanded, pieces 1-2 prefetched
  auto failing = ReadLater(2);             // pieces 1-2, in flight: joins them
  while (cache_->counters().shared_waits.load() < 1) std::this_thread::yield();
  source_->Answer(kPiece, EIO);
  auto got = failing.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_THAT(got.error().message, HasSubstr("held://blob"));
  // The reader of member 0 does not depend on piece 1; pieces 0 and 2 are still being
  // written into the group's room.
  EXPECT_GT(arena_->used(), 0u);
  source_->Answer(0);
  EXPECT_EQ(reader.get().value(), Member(0));
  EXPECT_GT(arena_->used(), 0u);
  source_->Answer(2 * kPiece);
  // Nothing left to read: a group with a failed piece is not kept.
  EXPECT_EQ(arena_->used(), 0u);
  EXPECT_FALSE(cache_->Resident(0));
  EXPECT_EQ(cache_->counters().io_errors.load(), 1u);
}

TEST_F(GroupLoadsTest, AMemberServedEarlyKeepsItsBytesWhenALaterPieceFails) {
  MakeCache(3);
  auto reader = std::async(std::launch::async,
                           [this] { return cache_->Read(*catalog_->FindPath("c/0"), 0, 1 << 20); });
  EXPECT_EQ(source_->Held(3).size(), 3u);
  source_->Answer(0);
  auto held = reader.get();  // member 0, pinned while it is being sent
  ASSERT_TRUE(held.ok()) << held.error().message;
  source_->Answer(kPiece, EIO);
  source_->Answer(2 * kPiece);
  // The load failed, but the room stays until the member is sent, and nothing reuses it.
  EXPECT_GT(arena_->used(), 0u);
  EXPECT_EQ(std::string(held->data(), held->size()), Member(0));
  *held = CachedBytes{};
  EXPECT_EQ(arena_->used(), 0u);
  // A later reader loads the group again, into a fresh room.
  auto again = ReadLater(3);
  for (size_t n = 4; n <= 6; ++n) source_->Answer(source_->Held(n).back());
  EXPECT_EQ(again.get().value(), Member(3));
}

TEST_F(GroupLoadsTest, AMemberServedEarlyIsCheckedAgainstItsOwnChecksum) {
  // The group's blob has a checksum: its load is checked whole once it has landed, so a
  // member served before that is checked alone.
  source_->expected_ =
      BlobInfo{source_->blob_.size(), ChecksumOf(source_->blob_.data(), source_->blob_.size()), 0};
  source_->blob_[3 * kMember + 100] ^= 1;  // the blob changed in member 3, in piece 2
  MakeCache(1);
  auto damaged = ReadLater(3);
  EXPECT_EQ(source_->Held(2), (std::vector<uint64_t>{2 * kPiece, 0}));
  source_->Answer(2 * kPiece);
  auto got = damaged.get();
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.error().message, HasSubstr("c/3"));
  source_->Answer(0);
  source_->Answer(source_->Held(3).at(0));
  // Once whole, the group's check names the one damaged member; the others are served.
  EXPECT_EQ(ReadLater(0).get().value(), Member(0));
  EXPECT_EQ(ReadLater(2).get().value(), Member(2));
  EXPECT_FALSE(ReadLater(3).get().ok());
}

TEST_F(GroupLoadsTest, GoesOnlyOnceNoPieceIsInFlight) {
  MakeCache(3);
  auto reader = ReadLater(0);
  EXPECT_EQ(source_->Held(3).size(), 3u);
  source_->Answer(0);
  EXPECT_EQ(reader.get().value(), Member(0));
  auto gone = std::async(std::launch::async, [this] { cache_.reset(); });
  // Pieces 1 and 2 still write into the arena and call back into the cache.
  EXPECT_EQ(gone.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  source_->Answer(kPiece);
  source_->Answer(2 * kPiece);
  gone.get();
  EXPECT_EQ(cache_, nullptr);
}

// A source that answers every read on a thread of its own after a latency of 1-3 ms, in
// whatever order the delays give, and counts the urgent reads.
class LatentSource : public BlobSource {
 public:
  explicit LatentSource(std::vector<std::string> blobs) : blobs_(std::move(blobs)) {}
  ~LatentSource() override {
    for (std::thread& t : threads_) t.join();
  }
  std::string_view kind() const override { return "latent"; }
  size_t blob_count() const override { return blobs_.size(); }
  std::string Describe(uint32_t b) const override { return "latent://" + std::to_string(b); }
  const BlobInfo* Expected(uint32_t) const override { return nullptr; }
  void Submit(ReadKind, std::vector<BlobRead> reads) override {
    std::lock_guard lock(mu_);
    for (BlobRead& r : reads) {
      urgent_ += r.urgent;
      const auto delay = std::chrono::microseconds(1000 + random_() % 2000);
      threads_.emplace_back([this, r = std::move(r), delay] {
        std::this_thread::sleep_for(delay);
        const std::string& blob = blobs_[r.blob];
        const size_t n = std::min<size_t>(r.length, blob.size() - r.offset);
        std::memcpy(r.buffer, blob.data() + r.offset, n);
        r.done(n);
      });
    }
  }
  nlohmann::json Stats() const override { return {{source_stat::kKind, "latent"}}; }
  size_t urgent() {
    std::lock_guard lock(mu_);
    return urgent_;
  }

 private:
  const std::vector<std::string> blobs_;
  std::mutex mu_;
  std::minstd_rand random_{7};        // guarded by mu_
  std::vector<std::thread> threads_;  // guarded by mu_
  size_t urgent_ = 0;                 // guarded by mu_
};

// 4 groups of 24 members of 1000-5000 bytes, one blob each: the blobs, each member's bytes,
// and the catalog.
struct RandomDataset {
  std::vector<std::string> blobs{4};
  std::vector<std::string> contents;
  std::unique_ptr<Catalog> catalog;
};

RandomDataset MakeRandomDataset(std::minstd_rand& random) {
  RandomDataset d;
  DatasetSpec spec;
  spec.index_file = "test";
  spec.classes = {"c"};
  spec.has_checksums = true;
  for (uint32_t g = 0; g < d.blobs.size(); ++g) {
    for (uint32_t m = 0; m < 24; ++m) {
      std::string member(1000 + random() % 4000, '\0');
      for (char& c : member) c = static_cast<char>(random());
      spec.members.push_back(MemberSpec{"c/" + std::to_string(d.contents.size()), 0, g,
                                        d.blobs[g].size(), member.size(),
                                        ChecksumOf(member.data(), member.size()), 0});
      d.blobs[g] += member;
      d.contents.push_back(member);
    }
    spec.groups.push_back(GroupSpec{"blob" + std::to_string(g), 0, d.blobs[g].size(), 0});
  }
  d.catalog = std::make_unique<Catalog>(std::move(*CatalogFromSpec(spec)));
  return d;
}

// Reads every member of `d` once, by `threads` readers in a shuffled order; the count of
// members that did not read back exact.
size_t ReadAllShuffled(GroupCache& cache, const RandomDataset& d, std::minstd_rand& random,
                       int threads) {
  std::vector<uint32_t> order(d.contents.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), random);
  std::atomic<size_t> next{0};
  std::atomic<size_t> wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < threads; ++r) {
    readers.emplace_back([&] {
      for (size_t i = next++; i < order.size(); i = next++) {
        const uint32_t m = order[i];
        auto bytes = cache.Read(*d.catalog->FindPath("c/" + std::to_string(m)), 0, 1 << 20);
        if (!bytes) ADD_FAILURE() << bytes.error().message;
        if (!bytes || std::string(bytes->data(), bytes->size()) != d.contents[m]) ++wrong;
      }
    });
  }
  for (std::thread& t : readers) t.join();
  return wrong.load();
}

TEST(GroupLoadsLatency, ReadersInRandomOrderGetExactBytesWhileDemandAndPrefetchShareTheSource) {
  // Read in blocks of 1 KiB and prefetch pieces of 8 KiB by 4 reader threads.
  std::minstd_rand random(11);
  const RandomDataset d = MakeRandomDataset(random);
  LatentSource source(d.blobs);
  auto arena = std::move(*PinnedArena::Create(1 << 20));
  CacheOptions options;
  options.prefetch_depth = 2;
  options.io_piece = 8192;
  options.demand_block = 1024;
  options.reads_in_flight = 4;
  GroupCache cache(*d.catalog, source, *arena, MakePolicy("consume-once", {24, 24, 24, 24}, 96),
                   options);
  EXPECT_EQ(ReadAllShuffled(cache, d, random, 4), 0u);
  EXPECT_GT(source.urgent(), 0u);
  EXPECT_EQ(cache.counters().io_errors.load(), 0u);
}

// A source with one queue served in order, 1 ms a read, urgent or not: a disk, or a
// throttled volume, where a read waits behind every read handed to it before.
class OneQueueSource : public BlobSource {
 public:
  explicit OneQueueSource(std::vector<std::string> blobs)
      : blobs_(std::move(blobs)), server_([this] { Serve(); }) {}
  ~OneQueueSource() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    server_.join();
  }
  std::string_view kind() const override { return "one queue"; }
  size_t blob_count() const override { return blobs_.size(); }
  std::string Describe(uint32_t b) const override { return "queue://" + std::to_string(b); }
  const BlobInfo* Expected(uint32_t) const override { return nullptr; }
  void Submit(ReadKind, std::vector<BlobRead> reads) override {
    std::lock_guard lock(mu_);
    for (BlobRead& r : reads) queue_.push_back(std::move(r));
    wake_.notify_all();
  }
  nlohmann::json Stats() const override { return {{source_stat::kKind, "one queue"}}; }

 private:
  void Serve() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      BlobRead r = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const std::string& blob = blobs_[r.blob];
      const size_t n = std::min<size_t>(r.length, blob.size() - r.offset);
      std::memcpy(r.buffer, blob.data() + r.offset, n);
      r.done(n);
      lock.lock();
    }
  }

  const std::vector<std::string> blobs_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<BlobRead> queue_;  // guarded by mu_
  bool stop_ = false;           // guarded by mu_
  std::thread server_;          // last: starts once the rest exists
};

TEST(GroupLoadsLatency, TheWindowShrinksWhereDemandReadsWaitBehindIt) {
  std::minstd_rand random(5);
  const RandomDataset d = MakeRandomDataset(random);
  OneQueueSource source(d.blobs);
  auto arena = std::move(*PinnedArena::Create(1 << 20));
  CacheOptions options;
  options.prefetch_depth = 4;
  options.io_piece = 1024;  // a read of a block costs what a read of a piece does
  options.demand_block = 1024;
  options.reads_in_flight = 32;
  GroupCache cache(*d.catalog, source, *arena, MakePolicy("consume-once", {24, 24, 24, 24}, 96),
                   options);
  // The window as it was while reading, sampled. Without demand reads that wait it only
  // ever grows (by one for each read that landed cheaply); here 32 reads ahead of a demand
  // read cost it 32 ms against the 1-2 ms it costs alone, so it must have shrunk.
  std::atomic<bool> done{false};
  std::vector<unsigned> windows;
  std::thread sampler([&] {
    while (!done.load()) {
      windows.push_back(cache.Stats()["prefetch_window"].get<unsigned>());
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  EXPECT_EQ(ReadAllShuffled(cache, d, random, 2), 0u);
  done = true;
  sampler.join();
  size_t shrinks = 0;
  for (size_t i = 1; i < windows.size(); ++i) shrinks += windows[i] < windows[i - 1];
  EXPECT_GT(shrinks, 0u);  // where it ends, or how high it got first, depends on the load
  EXPECT_GT(cache.counters().demand_reads.load(), 0u);
}

}  // namespace
}  // namespace gpufs
