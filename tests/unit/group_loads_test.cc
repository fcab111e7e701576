// Group loads read piece by piece: which piece goes when, what a reader may take before
// its group has landed, and what a failed piece leaves behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>

#include "cache/group_cache.h"
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

// One group of four 3000-byte members in one blob, read as 4096-byte pieces: member 0 lies
// in piece 0, member 1 in pieces 0-1, member 2 in pieces 1-2, member 3 in piece 2.
class GroupLoadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"c"};
    spec.has_checksums = true;
    std::string bytes;
    for (uint32_t m = 0; m < 4; ++m) {
      std::string member;
      for (size_t i = 0; i < kMember; ++i) member += static_cast<char>('a' + (m * 7 + i) % 26);
      spec.members.push_back(MemberSpec{"c/" + std::to_string(m), 0, 0, bytes.size(), kMember,
                                        ChecksumOf(member.data(), member.size()), 0});
      bytes += member;
    }
    spec.groups.push_back(GroupSpec{"blob", 0, bytes.size(), 0});
    catalog_ = std::make_unique<Catalog>(std::move(*Catalog::FromSpec(spec)));
    source_ = std::make_unique<HeldSource>(bytes);
  }

  void MakeCache(unsigned in_flight) {
    arena_ = std::move(*PinnedArena::Create(1 << 20));
    CacheOptions options;
    options.policy = "lru";
    options.prefetch_depth = 0;
    options.io_piece = kPiece;
    options.reads_in_flight = in_flight;
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
  // The demanded member's piece goes first, not the group's first piece.
  EXPECT_EQ(source_->Held(1), std::vector<uint64_t>{2 * kPiece});
  source_->Answer(2 * kPiece);
  auto got = reader.get();
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(*got, Member(3));
  EXPECT_FALSE(cache_->Resident(0));
  EXPECT_EQ(source_->Held(2), std::vector<uint64_t>{0});  // then the rest, in order
  source_->Answer(0);
  EXPECT_EQ(source_->Held(3), std::vector<uint64_t>{kPiece});
  source_->Answer(kPiece);
  EXPECT_EQ(ReadLater(1).get().value(), Member(1));
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_EQ(source_->submitted(), 3u);
}

TEST_F(GroupLoadsTest, APieceAReaderWaitsOnGoesBeforeTheQueuedOnes) {
  MakeCache(1);
  auto first = ReadLater(0);
  EXPECT_EQ(source_->Held(1), std::vector<uint64_t>{0});
  auto second = ReadLater(3);  // waits on the load in flight, for piece 2
  while (cache_->counters().shared_waits.load() < 1) std::this_thread::yield();
  source_->Answer(0);
  EXPECT_EQ(first.get().value(), Member(0));
  EXPECT_EQ(source_->Held(2), std::vector<uint64_t>{2 * kPiece});  // piece 2 before piece 1
  source_->Answer(2 * kPiece);
  EXPECT_EQ(second.get().value(), Member(3));
  source_->Answer(source_->Held(3).at(0));
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

TEST_F(GroupLoadsTest, AFailedPieceFailsTheReadersAndFreesTheRoomOnlyOnceNoPieceIsInFlight) {
  MakeCache(3);
  auto reader = ReadLater(0);
  EXPECT_EQ(source_->Held(3).size(), 3u);
  source_->Answer(kPiece, EIO);
  auto got = reader.get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_THAT(got.error().message, HasSubstr("held://blob"));
  // Pieces 0 and 2 are still being written into the group's room.
  EXPECT_GT(arena_->used(), 0u);
  source_->Answer(0);
  EXPECT_GT(arena_->used(), 0u);
  source_->Answer(2 * kPiece);
  EXPECT_EQ(arena_->used(), 0u);
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
  EXPECT_EQ(source_->Held(1), std::vector<uint64_t>{2 * kPiece});
  source_->Answer(2 * kPiece);
  auto got = damaged.get();
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.error().message, HasSubstr("c/3"));
  source_->Answer(source_->Held(2).at(0));
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

}  // namespace
}  // namespace gpufs
