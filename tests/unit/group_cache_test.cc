#include "cache/group_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "source/local_source.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;

// Reads with pread, but only once released, and counts what it was asked for; can fail.
class GatedEngine : public IoEngine {
 public:
  std::string_view name() const override { return "gated"; }
  void Submit(std::vector<IoRequest> requests) override {
    std::unique_lock lock(mu_);
    submitted_ += requests.size();
    submitted_changed_.notify_all();
    open_.wait(lock, [this] { return released_; });
    lock.unlock();
    for (IoRequest& r : requests) {
      const ssize_t n =
          fail_ ? -EIO : pread(r.fd, r.buffer, r.length, static_cast<off_t>(r.offset));
      r.done(n < 0 && !fail_ ? -errno : n);
    }
  }
  void Release() {
    std::lock_guard lock(mu_);
    released_ = true;
    open_.notify_all();
  }
  void WaitForSubmissions(size_t n) {
    std::unique_lock lock(mu_);
    submitted_changed_.wait(lock, [&] { return submitted_ >= n; });
  }
  size_t submitted() {
    std::lock_guard lock(mu_);
    return submitted_;
  }
  bool fail_ = false;

 private:
  std::mutex mu_;
  std::condition_variable open_;
  std::condition_variable submitted_changed_;
  bool released_ = false;
  size_t submitted_ = 0;
};

// Two groups of four 3000-byte members, in two blob files.
class GroupCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"c"};
    for (uint32_t g = 0; g < 2; ++g) {
      const std::string blob = "blob-" + std::to_string(g);
      std::string bytes;
      for (uint32_t m = 0; m < 4; ++m) {
        const std::string name = "c/" + std::to_string(g) + "-" + std::to_string(m);
        spec.members.push_back(MemberSpec{name, 0, g, bytes.size(), 3000, 0, 0});
        for (int i = 0; i < 3000; ++i) bytes += static_cast<char>('a' + (g * 4 + m + i) % 26);
        contents_[name] = bytes.substr(bytes.size() - 3000);
      }
      spec.groups.push_back(GroupSpec{blob, 0, bytes.size(), 0});
      std::ofstream(dir_.path() / blob, std::ios::binary) << bytes;
    }
    catalog_ = std::make_unique<Catalog>(std::move(*CatalogFromSpec(spec)));
    blobs_ = std::make_unique<BlobFiles>(dir_.path(), catalog_->blobs());
  }

  void MakeCache(size_t budget, const std::string& policy, IoEngine& engine) {
    arena_ = std::move(*PinnedArena::Create(budget));
    cache_ =
        std::make_unique<GroupCache>(*catalog_, SourceOver(engine), *arena_,
                                     MakePolicy(policy, {4, 4}, 8), CacheOptions{policy, 0, 0});
  }

  // The blob files read through `engine`, as a mount reads them.
  BlobSource& SourceOver(IoEngine& engine) {
    source_ = std::make_unique<LocalSource>(*blobs_, engine);
    return *source_;
  }

  NodeId Node(const std::string& path) { return *catalog_->FindPath(path); }

  std::string ReadWhole(const std::string& path) {
    auto bytes = cache_->Read(Node(path), 0, 1 << 20);
    EXPECT_TRUE(bytes.ok()) << bytes.error().message;
    return bytes.ok() ? std::string(bytes->data(), bytes->size()) : "";
  }

  TempDir dir_;
  std::map<std::string, std::string> contents_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<BlobFiles> blobs_;
  std::unique_ptr<LocalSource> source_;
  std::unique_ptr<PinnedArena> arena_;
  std::unique_ptr<GroupCache> cache_;
};

TEST_F(GroupCacheTest, LoadsAGroupOnceAndServesItsSiblingsFromMemory) {
  PreadEngine engine(2);
  MakeCache(1 << 20, "lru", engine);
  EXPECT_EQ(ReadWhole("c/0-0"), contents_["c/0-0"]);
  EXPECT_EQ(ReadWhole("c/0-3"), contents_["c/0-3"]);
  auto part = cache_->Read(Node("c/0-2"), 2990, 100);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(std::string(part->data(), part->size()), contents_["c/0-2"].substr(2990));
  EXPECT_EQ(cache_->Read(Node("c/0-2"), 3000, 10)->size(), 0u);
  EXPECT_EQ(cache_->counters().misses.load(), 1u);
  EXPECT_EQ(cache_->counters().hits.load(), 2u);  // a read at the end serves nothing
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_FALSE(cache_->Resident(1));
}

TEST_F(GroupCacheTest, ReadersOfAGroupInFlightShareItsOneRead) {
  GatedEngine engine;
  MakeCache(1 << 20, "lru", engine);
  std::vector<std::future<std::string>> readers;
  for (int m = 0; m < 4; ++m) {
    readers.push_back(std::async(std::launch::async,
                                 [this, m] { return ReadWhole("c/0-" + std::to_string(m)); }));
  }
  engine.WaitForSubmissions(1);
  engine.Release();
  for (int m = 0; m < 4; ++m) EXPECT_EQ(readers[m].get(), contents_["c/0-" + std::to_string(m)]);
  EXPECT_EQ(engine.submitted(), 1u);
  EXPECT_EQ(cache_->counters().groups_loaded.load(), 1u);
}

TEST_F(GroupCacheTest, ReadsJustTheMemberWhenTheGroupCannotBeAdmitted) {
  PreadEngine engine(1);
  MakeCache(8192, "pin", engine);  // smaller than a 12000-byte group
  EXPECT_EQ(ReadWhole("c/1-2"), contents_["c/1-2"]);
  EXPECT_EQ(cache_->counters().member_reads.load(), 1u);
  EXPECT_EQ(cache_->counters().bytes_from_source.load(), 3000u);
  EXPECT_LE(arena_->used(), arena_->capacity());
}

TEST_F(GroupCacheTest, MembersOnlyNeverLoadsAGroupThoughTheBudgetHasRoom) {
  PreadEngine engine(1);
  arena_ = std::move(*PinnedArena::Create(1 << 20));
  CacheOptions options{"lru", 0, 0};
  options.whole_groups = false;
  cache_ = std::make_unique<GroupCache>(*catalog_, SourceOver(engine), *arena_,
                                        MakePolicy("lru", {4, 4}, 8), options);
  for (const char* path : {"c/0-0", "c/0-1", "c/1-3", "c/0-0"}) {
    EXPECT_EQ(ReadWhole(path), contents_[path]);
  }
  EXPECT_EQ(cache_->counters().member_reads.load(), 4u);
  EXPECT_EQ(cache_->counters().groups_loaded.load(), 0u);
  EXPECT_EQ(cache_->counters().bytes_from_source.load(), 4u * 3000);
  EXPECT_FALSE(cache_->Resident(0));
  EXPECT_EQ(arena_->used(), 0u);
}

TEST_F(GroupCacheTest, KeepsWithinTheBudgetAndPinNeverEvicts) {
  PreadEngine engine(1);
  MakeCache(16384, "pin", engine);  // room for one group only
  EXPECT_EQ(ReadWhole("c/0-0"), contents_["c/0-0"]);
  EXPECT_EQ(ReadWhole("c/1-0"), contents_["c/1-0"]);
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_FALSE(cache_->Resident(1));
  EXPECT_EQ(cache_->counters().evictions.load(), 0u);
  EXPECT_EQ(cache_->counters().member_reads.load(), 1u);
  EXPECT_EQ(arena_->used(), 12288u);
}

TEST_F(GroupCacheTest, LruEvictsTheLeastRecentGroup) {
  PreadEngine engine(1);
  MakeCache(16384, "lru", engine);
  ReadWhole("c/0-0");
  ReadWhole("c/1-0");
  EXPECT_FALSE(cache_->Resident(0));
  EXPECT_TRUE(cache_->Resident(1));
  EXPECT_EQ(cache_->counters().evictions.load(), 1u);
}

TEST_F(GroupCacheTest, ConsumeOnceGivesUpOnlyGroupsWhoseMembersWereAllServed) {
  PreadEngine engine(1);
  MakeCache(16384, "consume-once", engine);  // room for one group
  for (int m = 0; m < 3; ++m) ReadWhole("c/0-" + std::to_string(m));
  EXPECT_EQ(ReadWhole("c/1-0"), contents_["c/1-0"]);  // group 0 still has a member to serve
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_FALSE(cache_->Resident(1));
  EXPECT_EQ(cache_->counters().member_reads.load(), 1u);
  ReadWhole("c/0-3");  // group 0 is consumed: it stays, but is the first to go
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_EQ(ReadWhole("c/1-2"), contents_["c/1-2"]);  // 3 of 4 left: below 90%, read alone
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_EQ(cache_->counters().member_reads.load(), 2u);
  EXPECT_EQ(cache_->counters().groups_loaded.load(), 1u);
}

TEST_F(GroupCacheTest, ReportsIoErrorsAsEioAndRetriesLater) {
  GatedEngine engine;
  engine.fail_ = true;
  engine.Release();
  MakeCache(1 << 20, "lru", engine);
  auto bytes = cache_->Read(Node("c/0-1"), 0, 100);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.error().code, EIO);
  EXPECT_THAT(bytes.error().message, HasSubstr("blob-0"));
  EXPECT_EQ(cache_->counters().io_errors.load(), 1u);
  EXPECT_EQ(arena_->used(), 0u);
  engine.fail_ = false;
  EXPECT_EQ(ReadWhole("c/0-1"), contents_["c/0-1"]);
}

TEST_F(GroupCacheTest, ReportsAShortBlobAsEio) {
  PreadEngine engine(1);
  MakeCache(1 << 20, "lru", engine);
  truncate((dir_.path() / "blob-1").c_str(), 5000);
  auto bytes = cache_->Read(Node("c/1-3"), 0, 100);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.error().code, EIO);
  EXPECT_THAT(bytes.error().message, HasSubstr("ends early"));
}

TEST_F(GroupCacheTest, ReadersWaitingOnAFailedLoadAllGetItsError) {
  GatedEngine engine;
  engine.fail_ = true;
  MakeCache(1 << 20, "lru", engine);
  std::vector<std::future<Result<CachedBytes>>> readers;
  for (int m = 0; m < 4; ++m) {
    readers.push_back(std::async(std::launch::async, [this, m] {
      return cache_->Read(Node("c/0-" + std::to_string(m)), 0, 100);
    }));
  }
  engine.WaitForSubmissions(1);
  while (cache_->counters().shared_waits.load() < 3) std::this_thread::yield();
  engine.Release();
  for (auto& reader : readers) {
    ASSERT_EQ(reader.wait_for(std::chrono::seconds(20)), std::future_status::ready);
    auto bytes = reader.get();
    ASSERT_FALSE(bytes.ok());
    EXPECT_EQ(bytes.error().code, EIO);
  }
  // The readers that waited on the load shared its failure instead of loading again.
  EXPECT_EQ(engine.submitted(), 1u);
}

TEST_F(GroupCacheTest, PrefetchLeavesAGroupWhoseLoadFailed) {
  GatedEngine engine;
  engine.fail_ = true;
  engine.Release();
  arena_ = std::move(*PinnedArena::Create(1 << 20));
  cache_ = std::make_unique<GroupCache>(*catalog_, SourceOver(engine), *arena_,
                                        MakePolicy("lru", {4, 4}, 8), CacheOptions{"lru", 2, 0});
  EXPECT_FALSE(cache_->Read(Node("c/0-0"), 0, 100).ok());
  // Prefetch may try each group once; a loop would retry them without end.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LE(engine.submitted(), 3u);
}

// Blob stamps as a mount takes them (see StampBlobFiles).
std::vector<BlobInfo> Stamps(const std::filesystem::path& dir, const Catalog& catalog,
                             std::vector<uint64_t> checksums) {
  std::vector<BlobInfo> stamps;
  for (size_t b = 0; b < catalog.blobs().size(); ++b) {
    struct stat st {};
    stat((dir / catalog.blobs()[b]).c_str(), &st);
    stamps.push_back(BlobInfo{static_cast<uint64_t>(st.st_size), checksums[b],
                              st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec});
  }
  return stamps;
}

void Rewrite(const std::filesystem::path& path, char byte, bool keep_mtime) {
  struct stat st {};
  stat(path.c_str(), &st);
  std::string bytes(static_cast<size_t>(st.st_size), byte);
  std::ofstream(path, std::ios::binary) << bytes;
  if (keep_mtime) {
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    utimensat(AT_FDCWD, path.c_str(), times, 0);
  }
}

TEST_F(GroupCacheTest, RefusesBlobsChangedSinceTheMount) {
  std::vector<uint64_t> sums;
  for (const auto& name : catalog_->blobs()) {
    const std::string bytes = [&] {
      std::ifstream f(dir_.path() / name, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(f), {});
    }();
    sums.push_back(ChecksumOf(bytes.data(), bytes.size()));
  }
  blobs_ = std::make_unique<BlobFiles>(dir_.path(), catalog_->blobs(),
                                       Stamps(dir_.path(), *catalog_, sums));
  PreadEngine engine(1);
  MakeCache(1 << 20, "lru", engine);
  // Rewritten in place, time kept: only the checksum can tell.
  Rewrite(dir_.path() / "blob-0", 'x', true);
  auto bytes = cache_->Read(Node("c/0-1"), 0, 100);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.error().code, EIO);
  EXPECT_THAT(bytes.error().message, HasSubstr("blob-0 does not match its checksum"));
  // Truncated, then deleted: EIO naming the blob, never ENOENT.
  truncate((dir_.path() / "blob-1").c_str(), 100);
  bytes = cache_->Read(Node("c/1-0"), 0, 100);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.error().code, EIO);
  EXPECT_THAT(bytes.error().message, HasSubstr("blob-1: it changed since the mount"));
  std::filesystem::remove(dir_.path() / "blob-1");
  blobs_ = std::make_unique<BlobFiles>(dir_.path(), catalog_->blobs(),
                                       Stamps(dir_.path(), *catalog_, sums));
  MakeCache(1 << 20, "lru", engine);
  bytes = cache_->Read(Node("c/1-0"), 0, 100);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.error().code, EIO);
  EXPECT_THAT(bytes.error().message, HasSubstr("blob-1: it is gone"));
}

TEST_F(GroupCacheTest, ServesNothingThroughALinkOutOfTheDatasetFolder) {
  TempDir outside;
  std::ofstream(outside.path() / "secret", std::ios::binary) << std::string(20000, 's');
  std::filesystem::remove(dir_.path() / "blob-1");
  std::filesystem::create_symlink(outside.path() / "secret", dir_.path() / "blob-1");
  PreadEngine engine(1);
  MakeCache(1 << 20, "lru", engine);
  auto bytes = cache_->Read(Node("c/1-0"), 0, 100);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.error().code, EIO);
  EXPECT_THAT(bytes.error().message, HasSubstr("leads outside the dataset folder"));
}

TEST(ConsumeOncePolicy, WantsOnlyGroupsMostlyUnservedAndStartsEpochsFromTheStream) {
  ConsumeOncePolicy policy({10, 10}, 20);
  policy.Admitted(0);
  const std::vector<bool> idle(2, false);
  EXPECT_TRUE(policy.Wanted(0));
  policy.Served(0, 0);
  EXPECT_TRUE(policy.Wanted(0));  // 9 of 10 left
  policy.Served(0, 1);
  EXPECT_FALSE(policy.Wanted(0));  // 8 of 10: loading it whole would waste a fifth
  for (uint32_t f = 2; f < 9; ++f) policy.Served(0, f);
  EXPECT_FALSE(policy.Victim(idle));
  policy.Served(0, 0);  // served again with 9 of 20 gone by: the same epoch
  EXPECT_EQ(policy.epoch(), 1u);
  policy.Served(0, 9);
  EXPECT_EQ(policy.Victim(idle), 0u);  // consumed: first to go
  policy.Served(0, 3);                 // half the dataset served: a repeat now starts epoch 2
  EXPECT_EQ(policy.epoch(), 2u);
  EXPECT_FALSE(policy.Victim(idle));  // worth keeping again
  EXPECT_TRUE(policy.Wanted(1));
}

TEST(ConsumeOncePolicy, EvictsOnlyGroupsWithNothingLeftToServe) {
  ConsumeOncePolicy policy({2, 2}, 4);
  policy.Admitted(0);
  policy.Admitted(1);
  std::vector<bool> busy(2, false);
  EXPECT_FALSE(policy.Victim(busy));
  policy.Served(1, 2);
  policy.Served(1, 3);
  EXPECT_EQ(policy.Victim(busy), 1u);
  busy[1] = true;
  EXPECT_FALSE(policy.Victim(busy));
}

TEST(LruPolicy, PicksTheLeastRecentlyServedIdleGroup) {
  LruPolicy policy;
  policy.Admitted(0);
  policy.Admitted(1);
  policy.Admitted(2);
  policy.Served(0, 0);
  std::vector<bool> busy(3, false);
  EXPECT_EQ(policy.Victim(busy), 1u);
  busy[1] = true;
  EXPECT_EQ(policy.Victim(busy), 2u);
  policy.Evicted(2);
  busy[1] = false;
  EXPECT_EQ(policy.Victim(busy), 1u);
  EXPECT_FALSE(PinPolicy().Victim(busy));
}

TEST(PinnedArena, AllocatesAlignedRangesAndCoalescesFreedOnes) {
  auto arena = PinnedArena::Create(64 * 1024);
  ASSERT_TRUE(arena.ok());
  auto& a = **arena;
  auto x = a.Allocate(5000);
  auto y = a.Allocate(4096);
  auto z = a.Allocate(100);
  ASSERT_TRUE(x && y && z);
  EXPECT_EQ(*x % 4096, 0u);
  EXPECT_EQ(a.used(), 8192u + 4096 + 4096);
  EXPECT_FALSE(a.Allocate(64 * 1024));
  a.Free(*y, 4096);
  a.Free(*x, 5000);
  a.Free(*z, 100);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.Allocate(64 * 1024), 0u);  // one range again
}

// The prefault thread faults in the target while ranges are allocated, written and freed;
// what it faults in keeps the bytes written there.
TEST(PinnedArena, PrefaultsTheTargetWhileAllocationsGoOn) {
  constexpr size_t kBudget = 8u << 20;
  constexpr size_t kTarget = 5u << 20;
  auto arena = PinnedArena::Create(kBudget, kTarget);
  ASSERT_TRUE(arena.ok());
  auto& a = **arena;
  std::vector<std::pair<size_t, size_t>> held;
  for (size_t i = 0; a.prefaulted() < kTarget; ++i) {
    const size_t bytes = 4096 * (1 + i % 7);
    auto offset = a.Allocate(bytes);
    ASSERT_TRUE(offset);
    std::memset(a.base() + *offset, static_cast<int>(i & 0xff), bytes);
    EXPECT_EQ(static_cast<unsigned char>(a.base()[*offset + bytes - 1]), i & 0xff);
    held.emplace_back(*offset, bytes);
    if (held.size() > 8) {
      a.Free(held.front().first, held.front().second);
      held.erase(held.begin());
    }
    std::this_thread::yield();
  }
  // Rounded to whole huge pages (the budget is at least one), never past the capacity.
  EXPECT_EQ(a.prefaulted(), 6u << 20);
  for (auto [offset, bytes] : held) a.Free(offset, bytes);
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.Allocate(a.capacity()), 0u);
}

// Memory is taken as the cache fills: the prefault thread stays a window ahead of the
// highest range handed out, and waits there, whatever the target.
TEST(PinnedArena, PrefaultsOnlyAWindowAheadOfWhatIsHandedOut) {
  constexpr size_t kMiB = 1u << 20;
  auto arena = PinnedArena::Create(256 * kMiB, 256 * kMiB, 32 * kMiB);
  ASSERT_TRUE(arena.ok());
  auto& a = **arena;
  auto settles_at = [&a](size_t expected) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (a.prefaulted() < expected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // and goes no further
    return a.prefaulted();
  };
  EXPECT_EQ(settles_at(32 * kMiB), 32 * kMiB);  // nothing handed out: one window
  ASSERT_EQ(a.Allocate(100 * kMiB), 0u);
  // Past 100 MiB + 32 MiB, in whole 32 MiB chunks.
  EXPECT_EQ(settles_at(160 * kMiB), 160 * kMiB);
  std::memset(a.base(), 1, 100 * kMiB);
  ASSERT_EQ(a.Allocate(150 * kMiB), 100 * kMiB);
  EXPECT_EQ(settles_at(256 * kMiB), 256 * kMiB);  // the target, never past it
}

TEST(PinnedArena, PrefaultsNoMoreThanTheCapacityAndNothingUnasked) {
  auto whole = PinnedArena::Create(64 * 1024, 1u << 30);
  ASSERT_TRUE(whole.ok());
  while ((*whole)->prefaulted() < (*whole)->capacity()) std::this_thread::yield();
  EXPECT_EQ((*whole)->prefaulted(), 64u * 1024);
  auto none = PinnedArena::Create(64 * 1024);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->prefaulted(), 0u);
}

TEST(PinnedArena, RoundsLargeBudgetsToAlignedHugePages) {
  auto arena = PinnedArena::Create((5u << 20) + 1);
  ASSERT_TRUE(arena.ok());
  EXPECT_EQ((*arena)->capacity(), 6u << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*arena)->base()) % (2u << 20), 0u);
}

}  // namespace
}  // namespace gpufs
