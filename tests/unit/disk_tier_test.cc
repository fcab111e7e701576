#include "cache/tier/disk_tier.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "cache/group_cache.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "source/network_fs.h"
#include "tests/unit/fake_source.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

namespace fs = std::filesystem;

struct Free {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, Free>;

// `bytes` of a recognizable pattern, in a buffer the tier may read and write directly.
Buffer Pattern(size_t bytes, char seed) {
  const size_t room = (bytes + DiskTier::kAlign - 1) / DiskTier::kAlign * DiskTier::kAlign;
  Buffer b(static_cast<char*>(std::aligned_alloc(DiskTier::kAlign, room)));
  for (size_t i = 0; i < room; ++i) b.get()[i] = static_cast<char>(seed + i * 7 % 251);
  return b;
}

Buffer Room(size_t bytes) { return Pattern(bytes, 0); }

uint64_t BytesBelow(const fs::path& root) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file() && e.path().filename() != ".ledger") total += e.file_size();
  }
  return total;
}

constexpr size_t kGroup = 300'000;  // not a multiple of the block or the page

class DiskTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<DiskTier> Open(const std::string& dataset, uint64_t max_bytes = 0,
                                 bool evict = true) {
    auto tier = DiskTier::Open(DiskTierOptions{dir_.path(), dataset, max_bytes, 0, evict});
    EXPECT_TRUE(tier.ok()) << tier.error().message;
    return std::move(*tier);
  }
  // Copies of groups 0..n-1 written by a mount that has gone, read an hour ago.
  void WriteAnEarlierMountsCopies(const std::string& dataset, uint64_t bound, uint32_t n) {
    Buffer group = Pattern(kGroup, 'e');
    auto earlier = Open(dataset, bound);
    for (uint32_t g = 0; g < n; ++g) {
      ASSERT_TRUE(earlier->Write(TierFileName(g, "b", "v1", 0, kGroup), group.get(), kGroup));
    }
    for (const auto& entry : fs::directory_iterator(dir_.path() / dataset)) {
      fs::last_write_time(entry.path(), fs::file_time_type::clock::now() - std::chrono::hours(1));
    }
  }

  fs::path CopyPath(const std::string& dataset, const std::string& name) {
    return dir_.path() / dataset / name;
  }
  TempDir dir_;
};

TEST_F(DiskTierTest, KeepsAGroupAndReadsItBackWholeOrInSlices) {
  auto tier = Open("data-0123456789abcdef");
  const std::string name = TierFileName(3, "blob", "etag=1", 0, kGroup);
  Buffer group = Pattern(kGroup, 'a');
  Buffer back = Room(kGroup);
  EXPECT_FALSE(tier->Present(name));
  EXPECT_FALSE(tier->ReadWhole(name, back.get(), kGroup));
  ASSERT_TRUE(tier->Write(name, group.get(), kGroup));
  EXPECT_TRUE(tier->Present(name));
  ASSERT_TRUE(tier->ReadWhole(name, back.get(), kGroup));
  EXPECT_EQ(std::memcmp(back.get(), group.get(), kGroup), 0);
  std::string slice(70'000, '\0');  // across two block boundaries, to the group's end
  ASSERT_TRUE(tier->ReadSlice(name, kGroup - slice.size(), slice.size(), slice.data()));
  EXPECT_EQ(slice, std::string(group.get() + kGroup - slice.size(), slice.size()));
  EXPECT_FALSE(tier->ReadSlice(name, kGroup - 10, 20, slice.data()));  // past its end
  const auto stats = tier->Stats();
  EXPECT_EQ(stats[tier_stat::kWrites], 1);
  EXPECT_EQ(stats[tier_stat::kHits], 1);
  EXPECT_EQ(stats[tier_stat::kSliceHits], 1);
  EXPECT_EQ(stats[tier_stat::kUsed], BytesBelow(dir_.path()));
}

TEST_F(DiskTierTest, CopiesOfEarlierVersionsIn64KiBBlocksAreReadAsWritten) {
  DiskTierOptions earlier{dir_.path(), "data-0123456789abcdef", 0, 0};
  earlier.block_bytes = 64 << 10;  // as copies were written before 16 KiB blocks
  const std::string name = TierFileName(3, "blob", "etag=1", 0, kGroup);
  Buffer group = Pattern(kGroup, 'o');
  ASSERT_TRUE((*DiskTier::Open(earlier))->Write(name, group.get(), kGroup));
  auto tier = Open("data-0123456789abcdef");
  Buffer back = Room(kGroup);
  ASSERT_TRUE(tier->ReadWhole(name, back.get(), kGroup));
  EXPECT_EQ(std::memcmp(back.get(), group.get(), kGroup), 0);
  std::string slice(70'000, '\0');
  ASSERT_TRUE(tier->ReadSlice(name, 100'000, slice.size(), slice.data()));
  EXPECT_EQ(slice, std::string(group.get() + 100'000, slice.size()));
  EXPECT_EQ(tier->Stats()[tier_stat::kDamaged], 0);
}

TEST_F(DiskTierTest, NamesChangeWithTheBlobsIdentityAndNothingUnknownIsKept) {
  EXPECT_NE(TierFileName(0, "b", "etag=1", 0, 10), TierFileName(0, "b", "etag=2", 0, 10));
  EXPECT_NE(TierFileName(0, "b", "etag=1", 0, 10), TierFileName(0, "b", "etag=1", 4096, 10));
  EXPECT_NE(TierFileName(0, "b", "etag=1", 0, 10), TierFileName(0, "c", "etag=1", 0, 10));
  EXPECT_EQ(TierFileName(0, "b", "", 0, 10), "");
  EXPECT_NE(TierDatasetFolder("s3://bucket/train/"), TierDatasetFolder("s3://other/train/"));
  EXPECT_TRUE(TierDatasetFolder("s3://bucket/train/").starts_with("train-"));
}

TEST_F(DiskTierTest, ADamagedCopyIsDeletedAndNeverServed) {
  auto tier = Open("data-0123456789abcdef");
  const std::string name = TierFileName(0, "blob", "v1", 0, kGroup);
  Buffer group = Pattern(kGroup, 'x');
  ASSERT_TRUE(tier->Write(name, group.get(), kGroup));
  {
    std::fstream f(CopyPath("data-0123456789abcdef", name), std::ios::in | std::ios::out);
    f.seekp(static_cast<std::streamoff>(fs::file_size(CopyPath("data-0123456789abcdef", name)) -
                                        DiskTier::kAlign - 1000));
    f.put('!');
  }
  Buffer back = Room(kGroup);
  EXPECT_FALSE(tier->ReadWhole(name, back.get(), kGroup));
  EXPECT_FALSE(tier->Present(name));
  EXPECT_EQ(tier->Stats()[tier_stat::kDamaged], 1);
  EXPECT_EQ(tier->Stats()[tier_stat::kUsed], 0);  // its room is given back
}

TEST_F(DiskTierTest, ATornCopyIsNeverServedWholeOrInSlices) {
  auto tier = Open("data-0123456789abcdef");
  Buffer group = Pattern(kGroup, 'y');
  std::string slice(100, '\0');
  for (const bool whole : {true, false}) {
    const std::string name = TierFileName(whole, "blob", "v1", 0, kGroup);
    ASSERT_TRUE(tier->Write(name, group.get(), kGroup));
    fs::resize_file(CopyPath("data-0123456789abcdef", name), kGroup / 2);
    Buffer back = Room(kGroup);
    EXPECT_FALSE(whole ? tier->ReadWhole(name, back.get(), kGroup)
                       : tier->ReadSlice(name, kGroup - 100, 100, slice.data()));
    EXPECT_FALSE(tier->Present(name));
  }
  EXPECT_EQ(tier->Stats()[tier_stat::kDamaged], 2);
}

// Copies of another group renamed into place are refused by the name in their header.
TEST_F(DiskTierTest, ACopyUnderAnotherNameIsRefused) {
  auto tier = Open("data-0123456789abcdef");
  const std::string a = TierFileName(0, "blob", "v1", 0, kGroup);
  const std::string b = TierFileName(1, "blob", "v1", 0, kGroup);
  Buffer group = Pattern(kGroup, 'z');
  ASSERT_TRUE(tier->Write(a, group.get(), kGroup));
  fs::rename(CopyPath("data-0123456789abcdef", a), CopyPath("data-0123456789abcdef", b));
  Buffer back = Room(kGroup);
  EXPECT_FALSE(tier->ReadWhole(b, back.get(), kGroup));
}

TEST_F(DiskTierTest, TwoInstancesKeepTheBoundTogetherEvictingTheLeastRecentlyRead) {
  Buffer group = Pattern(kGroup, 'q');
  const uint64_t copy_bytes = 4096 + 303'104;  // header + payload rounded to pages
  const uint64_t bound = 6 * copy_bytes;
  auto one = Open("one-0123456789abcdef", bound);
  auto two = Open("two-0123456789abcdef", bound);
  const std::string first = TierFileName(0, "one", "v1", 0, kGroup);
  ASSERT_TRUE(one->Write(first, group.get(), kGroup));
  for (uint32_t g = 1; g < 12; ++g) {
    DiskTier& tier = g % 2 ? *two : *one;
    ASSERT_TRUE(tier.Write(TierFileName(g, "x", "v1", 0, kGroup), group.get(), kGroup));
    Buffer back = Room(kGroup);
    ASSERT_TRUE(one->ReadWhole(first, back.get(), kGroup));  // read, so kept
    EXPECT_LE(BytesBelow(dir_.path()), bound) << "after group " << g;
  }
  EXPECT_TRUE(one->Present(first));
  EXPECT_GT(one->Stats()[tier_stat::kEvictions].get<uint64_t>() +
                two->Stats()[tier_stat::kEvictions].get<uint64_t>(),
            0u);
  EXPECT_EQ(two->Stats()[tier_stat::kUsed], BytesBelow(dir_.path()));
}

TEST_F(DiskTierTest, RoomIsTheBoundOrTheFreeSpaceLessTheReserve) {
  EXPECT_EQ(Open("one-0123456789abcdef", 1 << 20)->Room(), uint64_t{1} << 20);
  // A reserve larger than the disk leaves room for what is kept already, no more.
  auto tier = DiskTier::Open(
      DiskTierOptions{dir_.path(), "two-0123456789abcdef", 0, uint64_t{1} << 62, true});
  ASSERT_TRUE(tier.ok()) << tier.error().message;
  EXPECT_EQ((*tier)->Room(), (*tier)->Stats()[tier_stat::kUsed].get<uint64_t>());
}

TEST_F(DiskTierTest, WithoutEvictionItFillsAndKeeps) {
  Buffer group = Pattern(kGroup, 'p');
  auto tier = Open("pin-0123456789abcdef", 3 * (4096 + 303'104), false);
  for (uint32_t g = 0; g < 5; ++g) {
    EXPECT_EQ(tier->Write(TierFileName(g, "b", "v1", 0, kGroup), group.get(), kGroup), g < 3);
  }
  for (uint32_t g = 0; g < 3; ++g)
    EXPECT_TRUE(tier->Present(TierFileName(g, "b", "v1", 0, kGroup)));
  EXPECT_EQ(tier->Stats()[tier_stat::kSkipped], 2);
}

// A copy being written is reserved (pending) and has a temporary file growing in the
// folder: a recount while it is written counts it once, so the tier never reports more
// than its bound.
TEST_F(DiskTierTest, ACopyBeingWrittenIsCountedOnceWhenTheFolderIsCounted) {
  Buffer group = Pattern(kGroup, 'w');
  const uint64_t bound = 3 * (4096 + 303'104);
  const std::string dataset = "pin-0123456789abcdef";
  auto tier = Open(dataset, bound, false);
  for (uint32_t g = 0; g < 2; ++g) {
    ASSERT_TRUE(tier->Write(TierFileName(g, "b", "v1", 0, kGroup), group.get(), kGroup));
  }
  const std::string third = TierFileName(2, "b", "v1", 0, kGroup);
  ASSERT_TRUE(tier->Claim(third, kGroup));
  {  // its bytes so far, as Write leaves them before the rename
    std::ofstream temp(CopyPath(dataset, ".tmp-" + std::to_string(getpid()) + "-99"));
    temp << std::string(200'000, 'w');
  }
  // The tier is full: this write recounts the folder, and is refused.
  EXPECT_FALSE(tier->Write(TierFileName(3, "b", "v1", 0, kGroup), group.get(), kGroup));
  EXPECT_LE(tier->Stats()[tier_stat::kUsed].get<uint64_t>(), bound);
  fs::remove(CopyPath(dataset, ".tmp-" + std::to_string(getpid()) + "-99"));
  tier->Unclaim(third, kGroup);
}

// Writers race: while some copies are renamed into place (or found there already, their
// reservations given up), other writes find the tier full and count the folder. Each copy is
// counted as a reservation or as a file, never as neither, so the copies kept never exceed the
// bound.
TEST_F(DiskTierTest, CopiesRenamedDuringACountAreCountedSoTheBoundHolds) {
  Buffer group = Pattern(kGroup, 'r');
  const uint64_t copy_bytes = 4096 + 303'104;
  for (int round = 0; round < 40; ++round) {
    const fs::path root = dir_.path() / std::to_string(round);
    auto opened = DiskTier::Open(
        DiskTierOptions{root, "race-0123456789abcdef", 3 * copy_bytes + copy_bytes / 2, 0, false});
    ASSERT_TRUE(opened.ok()) << opened.error().message;
    DiskTier* tier = opened->get();
    std::vector<std::thread> writers;
    for (uint32_t t = 0; t < 6; ++t) {
      writers.emplace_back([&, t] {
        for (uint32_t g = t; g < 48; g += 6)
          tier->Write(TierFileName(g % 20, "b", "v1", 0, kGroup), group.get(), kGroup);
      });
    }
    for (auto& w : writers) w.join();
    ASSERT_LE(BytesBelow(root), 3 * copy_bytes) << "round " << round;
    ASSERT_EQ(tier->Stats()[tier_stat::kUsed].get<uint64_t>(), BytesBelow(root))
        << "round " << round;
  }
}

TEST_F(DiskTierTest, LeavesFilesThatAreNotItsOwn) {
  fs::create_directories(dir_.path() / "photos");
  std::ofstream(dir_.path() / "photos" / "keep.grp") << std::string(400'000, 'k');
  Buffer group = Pattern(kGroup, 'o');
  auto tier = Open("own-0123456789abcdef", 2 * (4096 + 303'104));
  for (uint32_t g = 0; g < 4; ++g)
    tier->Write(TierFileName(g, "b", "v1", 0, kGroup), group.get(), kGroup);
  EXPECT_TRUE(fs::exists(dir_.path() / "photos" / "keep.grp"));
}

TEST_F(DiskTierTest, AFolderRemovedTurnsItOff) {
  auto tier = Open("gone-0123456789abcdef");
  fs::remove_all(dir_.path() / "gone-0123456789abcdef");
  Buffer group = Pattern(kGroup, 'g');
  EXPECT_FALSE(tier->Write(TierFileName(0, "b", "v1", 0, kGroup), group.get(), kGroup));
  EXPECT_FALSE(tier->enabled());
}

TEST_F(DiskTierTest, AnUnusableFolderIsRefusedNamingIt) {
  std::ofstream(dir_.path() / "file") << "x";
  auto tier = DiskTier::Open(DiskTierOptions{dir_.path() / "file" / "tier", "d", 0, 0, true});
  ASSERT_FALSE(tier.ok());
  EXPECT_NE(tier.error().message.find((dir_.path() / "file" / "tier").string()), std::string::npos);
}

mode_t ModeOf(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST_F(DiskTierTest, ItsFoldersAre0700AndItsFiles0600) {
  const fs::path root = dir_.path() / "cache" / "tier";
  auto tier = DiskTier::Open(DiskTierOptions{root, "d-0123456789abcdef", 0, 0, true});
  ASSERT_TRUE(tier.ok()) << tier.error().message;
  Buffer group = Pattern(kGroup, 'm');
  const std::string name = TierFileName(0, "b", "v1", 0, kGroup);
  ASSERT_TRUE((*tier)->Write(name, group.get(), kGroup));
  EXPECT_EQ(ModeOf(dir_.path() / "cache"), 0700);
  EXPECT_EQ(ModeOf(root), 0700);
  EXPECT_EQ(ModeOf(root / "d-0123456789abcdef"), 0700);
  EXPECT_EQ(ModeOf(root / ".ledger"), 0600);
  EXPECT_EQ(ModeOf(root / "d-0123456789abcdef" / name), 0600);
}

TEST_F(DiskTierTest, AnOlderTiersModesAreTightened) {
  auto first = Open("old-0123456789abcdef");
  first.reset();
  fs::permissions(dir_.path() / "old-0123456789abcdef", fs::perms(0755));
  fs::permissions(dir_.path() / ".ledger", fs::perms(0644));
  Open("old-0123456789abcdef");
  EXPECT_EQ(ModeOf(dir_.path() / "old-0123456789abcdef"), 0700);
  EXPECT_EQ(ModeOf(dir_.path() / ".ledger"), 0600);
}

TEST_F(DiskTierTest, ARootOfAnotherUidIsRefusedNamingTheFix) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a folder to another uid needs root";
  const fs::path root = dir_.path() / "theirs";
  fs::create_directory(root);
  ASSERT_EQ(chown(root.c_str(), 65534, 65534), 0);
  auto tier = DiskTier::Open(DiskTierOptions{root, "d-0123456789abcdef", 0, 0, true});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.error().message,
            "cannot use disk cache " + root.string() +
                ": owned by uid 65534, not you (uid 0); give each user a folder of their own "
                "(--disk-cache DIR)");
  EXPECT_FALSE(fs::exists(root / "d-0123456789abcdef"));
}

TEST_F(DiskTierTest, AWorldWritableRootIsRefused) {
  const fs::path root = dir_.path() / "open";
  fs::create_directory(root);
  fs::permissions(root, fs::perms(0777));
  auto tier = DiskTier::Open(DiskTierOptions{root, "d-0123456789abcdef", 0, 0, true});
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.error().message, "cannot use disk cache " + root.string() +
                                      ": writable by others (mode 0777); chmod 700 " +
                                      root.string());
}

TEST_F(DiskTierTest, LinksPlantedAtItsFolderOrLedgerLeadNowhere) {
  TempDir outside;
  const fs::path secret = outside.path() / "secret";
  std::ofstream(secret) << "root only";
  fs::permissions(secret, fs::perms(0600));
  const fs::path root = dir_.path() / "root";
  fs::create_directory(root);
  fs::permissions(root, fs::perms(0700));
  fs::create_symlink(outside.path(), root / "d-0123456789abcdef");
  auto tier = DiskTier::Open(DiskTierOptions{root, "d-0123456789abcdef", 0, 0, true});
  ASSERT_FALSE(tier.ok());
  EXPECT_NE(tier.error().message.find("symbolic link"), std::string::npos);
  fs::remove(root / "d-0123456789abcdef");
  fs::create_symlink(secret, root / ".ledger");
  tier = DiskTier::Open(DiskTierOptions{root, "d-0123456789abcdef", 0, 0, true});
  ASSERT_FALSE(tier.ok());
  EXPECT_NE(tier.error().message.find("symbolic link"), std::string::npos);
  EXPECT_EQ(ModeOf(secret), 0600);
  std::ifstream in(secret);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "root only");
}

TEST_F(DiskTierTest, EvictionNeverFollowsALinkedDatasetFolder) {
  TempDir outside;
  const fs::path kept = outside.path() / "g000000-0000000000000000.grp";
  std::ofstream(kept) << std::string(400'000, 'k');
  fs::last_write_time(kept, fs::file_time_type::clock::now() - std::chrono::hours(24));
  Buffer group = Pattern(kGroup, 'e');
  const uint64_t bound = 2 * (4096 + 303'104);
  WriteAnEarlierMountsCopies("own-0123456789abcdef", bound, 2);
  auto tier = Open("own-0123456789abcdef", bound);
  fs::create_symlink(outside.path(), dir_.path() / "out-0123456789abcdef");
  for (uint32_t g = 2; g < 4; ++g)
    tier->Write(TierFileName(g, "b", "v1", 0, kGroup), group.get(), kGroup);
  EXPECT_TRUE(fs::exists(kept));
  EXPECT_GT(tier->Stats()[tier_stat::kEvictions].get<uint64_t>(), 0u);
}

// A full tier keeps the copies this mount wrote or read rather than evict them for new
// ones: in a random epoch the next epoch then finds its share, where evicting the oldest
// to admit each new group would leave it nothing it reads before evicting it again.
TEST_F(DiskTierTest, WhenFullItKeepsThisMountsCopiesAndSkipsNewOnes) {
  Buffer group = Pattern(kGroup, 'f');
  const uint64_t bound = 2 * (4096 + 303'104);
  WriteAnEarlierMountsCopies("own-0123456789abcdef", bound, 1);
  auto tier = Open("own-0123456789abcdef", bound);
  EXPECT_FALSE(tier->Full());
  ASSERT_TRUE(tier->Write(TierFileName(1, "b", "v1", 0, kGroup), group.get(), kGroup));
  ASSERT_TRUE(tier->Write(TierFileName(2, "b", "v1", 0, kGroup), group.get(), kGroup));
  EXPECT_FALSE(tier->Present(TierFileName(0, "b", "v1", 0, kGroup)));  // the earlier mount's
  EXPECT_FALSE(tier->Write(TierFileName(3, "b", "v1", 0, kGroup), group.get(), kGroup));
  EXPECT_TRUE(tier->Full());
  EXPECT_TRUE(tier->Present(TierFileName(1, "b", "v1", 0, kGroup)));
  EXPECT_TRUE(tier->Present(TierFileName(2, "b", "v1", 0, kGroup)));
  EXPECT_EQ(tier->Stats()[tier_stat::kSkipped], 1);
}

// The group cache over a fake source: two groups of four 5000-byte members.
class TieredCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"c"};
    spec.has_sha256 = WithDigests();
    std::vector<std::string> blobs;
    for (uint32_t g = 0; g < 2; ++g) {
      std::string bytes;
      for (uint32_t m = 0; m < 4; ++m) {
        const std::string name = "c/" + std::to_string(g) + "-" + std::to_string(m);
        spec.members.push_back(MemberSpec{name, 0, g, bytes.size(), 5000, 0, 0});
        for (int i = 0; i < 5000; ++i) bytes += static_cast<char>('a' + (g * 4 + m + i) % 26);
        contents_[name] = bytes.substr(bytes.size() - 5000);
        spec.members.back().sha256 = Sha256Of(contents_[name].data(), 5000);
      }
      spec.groups.push_back(GroupSpec{"blob-" + std::to_string(g), 0, bytes.size(), 0});
      blobs.push_back(bytes);
    }
    catalog_ = std::make_unique<Catalog>(std::move(*CatalogFromSpec(spec)));
    source_ = std::make_unique<FakeSource>(blobs);
    auto tier = DiskTier::Open(DiskTierOptions{dir_.path(), "t-0123456789abcdef", 0, 0, true});
    ASSERT_TRUE(tier.ok());
    tier_ = std::move(*tier);
  }

  virtual bool WithDigests() const { return false; }

  // A fresh cache over the same tier, as a remount makes; `budget` bytes of memory.
  GroupCache& Remount(size_t budget) {
    cache_.reset();  // written back before it goes
    arena_ = std::move(*PinnedArena::Create(budget));
    cache_ = std::make_unique<GroupCache>(*catalog_, *source_, *arena_,
                                          MakePolicy("consume-once", {4, 4}, 8),
                                          CacheOptions{"consume-once", 0, 0}, tier_.get());
    return *cache_;
  }

  // In name order, or (interleaved) a member of each group in turn, so that with room for
  // one group the other's members are read alone.
  void ExpectEveryFile(bool interleaved = false) {
    std::vector<std::string> order;
    for (const auto& [path, bytes] : contents_) order.push_back(path);
    if (interleaved)
      order = {"c/0-0", "c/1-0", "c/0-1", "c/1-1", "c/0-2", "c/1-2", "c/0-3", "c/1-3"};
    for (const std::string& path : order) {
      const std::string& bytes = contents_[path];
      auto got = cache_->Read(*catalog_->FindPath(path), 0, 1 << 20);
      ASSERT_TRUE(got.ok()) << got.error().message;
      EXPECT_EQ(std::string(got->data(), got->size()), bytes) << path;
    }
  }

  // Waits until both groups have copies: fills run in the background.
  void WaitForCopies() {
    for (int i = 0; i < 2000 && !(cache_->TierGroups()[0] && cache_->TierGroups()[1]); ++i) {
      usleep(5000);
    }
  }

  TempDir dir_;
  std::map<std::string, std::string> contents_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<FakeSource> source_;
  std::unique_ptr<DiskTier> tier_;
  std::unique_ptr<PinnedArena> arena_;
  std::unique_ptr<GroupCache> cache_;
};

TEST_F(TieredCacheTest, ARemountReadsEveryGroupFromDiskAndNothingFromTheSource) {
  Remount(1 << 20);
  ExpectEveryFile();
  Remount(1 << 20);
  EXPECT_EQ(cache_->TierGroups(), (std::vector<bool>{true, true}));
  const size_t before = source_->calls().size();
  ExpectEveryFile();
  EXPECT_EQ(source_->calls().size(), before);
  EXPECT_EQ(cache_->Stats()["tier"][tier_stat::kHits], 2);
}

TEST_F(TieredCacheTest, MembersBeyondTheBudgetAreFilledToDiskAndReadFromThere) {
  Remount(24 << 10);  // one group fits
  ExpectEveryFile(true);
  WaitForCopies();
  EXPECT_GE(cache_->Stats()["tier"][tier_stat::kFills].get<uint64_t>(), 1u);
  const size_t before = source_->calls().size();
  Remount(24 << 10);
  ExpectEveryFile(true);
  EXPECT_EQ(source_->calls().size(), before);
  EXPECT_GT(cache_->Stats()["tier"][tier_stat::kSliceHits].get<uint64_t>(), 0u);
}

TEST_F(TieredCacheTest, AChangedBlobIsFetchedAgainNotReadFromItsOldCopy) {
  Remount(1 << 20);
  ExpectEveryFile();
  source_->blob(1)[0] = 'Z';  // a new version of blob 1, as a store gives a new ETag
  source_->Bump(1);
  contents_["c/1-0"][0] = 'Z';
  Remount(1 << 20);
  EXPECT_EQ(cache_->TierGroups(), (std::vector<bool>{true, false}));
  ExpectEveryFile();
}

// The index has SHA-256 digests: copies are checked against them, not only against their
// own block sums, which whoever can write the folder can recompute.
class DigestedTierTest : public TieredCacheTest {
 protected:
  bool WithDigests() const override { return true; }

  // Replaces group `g`'s copy with other bytes under valid block sums, as someone who can
  // write the tier's folder could.
  void Plant(uint32_t g) {
    const std::string name =
        TierFileName(g, source_->Describe(g), source_->Identity(g), 0, source_->blob(g).size());
    ASSERT_TRUE(fs::remove(dir_.path() / "t-0123456789abcdef" / name)) << name;
    std::string planted = source_->blob(g);
    planted[5000 + 17] ^= 0x20;  // in the group's second member
    Buffer bytes = Room(planted.size());
    std::memcpy(bytes.get(), planted.data(), planted.size());
    ASSERT_TRUE(tier_->Write(name, bytes.get(), planted.size()));
  }
};

TEST_F(DigestedTierTest, APlantedGroupCopyIsDeletedAndTheGroupReadFromTheSource) {
  Remount(1 << 20);
  ExpectEveryFile();
  Remount(1 << 20);  // the first cache's groups are written back as it goes
  Plant(1);
  Remount(1 << 20);
  const size_t before = source_->calls().size();
  ExpectEveryFile();
  EXPECT_GT(source_->calls().size(), before);
  EXPECT_EQ(cache_->Stats()["tier"][tier_stat::kHashMismatches], 1);
  EXPECT_EQ(cache_->Stats()["tier"][tier_stat::kDamaged], 0);  // its block sums were valid
}

TEST_F(DigestedTierTest, APlantedCopyIsNotServedToMemberReadsEither) {
  Remount(24 << 10);  // one group fits: the other's members are read alone
  ExpectEveryFile(true);
  WaitForCopies();
  Remount(24 << 10);
  Plant(0);
  Plant(1);
  Remount(24 << 10);
  ExpectEveryFile(true);
  EXPECT_GE(cache_->Stats()["tier"][tier_stat::kHashMismatches].get<uint64_t>(), 1u);
}

// A member read alone from its copy in small reads is hashed whole once, not once per
// read: a large member would otherwise be read and hashed again for every piece of it.
TEST_F(DigestedTierTest, AMemberReadAloneInPiecesIsHashedOnce) {
  Remount(24 << 10);  // one group fits
  ExpectEveryFile(true);
  WaitForCopies();
  Remount(24 << 10);
  const std::vector<std::string> order = {"c/0-0", "c/1-0", "c/0-1", "c/1-1",
                                          "c/0-2", "c/1-2", "c/0-3", "c/1-3"};
  const uint64_t before = tier_->Stats()[tier_stat::kReadBytes].get<uint64_t>();
  constexpr size_t kPiece = 500;
  for (size_t at = 0; at < 5000; at += kPiece) {
    for (const std::string& path : order) {
      auto got = cache_->Read(*catalog_->FindPath(path), at, kPiece);
      ASSERT_TRUE(got.ok()) << got.error().message;
      EXPECT_EQ(std::string(got->data(), got->size()), contents_[path].substr(at, kPiece)) << path;
    }
  }
  const uint64_t slices = cache_->Stats()["tier"][tier_stat::kSliceHits].get<uint64_t>();
  const uint64_t read = tier_->Stats()[tier_stat::kReadBytes].get<uint64_t>() - before;
  ASSERT_GT(slices, 8u);
  // Each member whole once at most, then only the pieces asked for; and the groups.
  EXPECT_LE(read, 8 * 5000 + slices * kPiece + 2 * (24 << 10)) << slices << " slice hits";
}

}  // namespace
}  // namespace gpufs

namespace gpufs {
namespace {

TEST(NetworkFilesystem, NamesNetworkAndFuseTypesNotLocalOnes) {
  EXPECT_EQ(NetworkFilesystemName(0x6969), "NFS");
  EXPECT_EQ(NetworkFilesystemName(0x0BD00BD0), "Lustre");
  EXPECT_EQ(NetworkFilesystemName(0xFF534D42), "CIFS");
  EXPECT_EQ(NetworkFilesystemName(0xFE534D42), "SMB2");
  EXPECT_EQ(NetworkFilesystemName(0x47504653), "GPFS");
  EXPECT_EQ(NetworkFilesystemName(0x00C36400), "CephFS");
  EXPECT_EQ(NetworkFilesystemName(0x65735546), "FUSE");
  EXPECT_EQ(NetworkFilesystemName(0x19830326), "BeeGFS");
  EXPECT_EQ(NetworkFilesystemName(0x5346414F), "AFS");
  EXPECT_EQ(NetworkFilesystemName(0x01021997), "9P");
  EXPECT_EQ(NetworkFilesystemName(0xEF53), std::nullopt);      // ext4
  EXPECT_EQ(NetworkFilesystemName(0x58465342), std::nullopt);  // XFS
  EXPECT_EQ(NetworkFilesystemName(0x01021994), std::nullopt);  // tmpfs
}

TEST(NetworkFilesystem, TypeOfAMissingFolderIsItsNearestAncestors) {
  TempDir dir;
  const auto here = FilesystemTypeOf(dir.path());
  ASSERT_TRUE(here);
  EXPECT_EQ(FilesystemTypeOf(dir.path() / "not" / "yet"), here);
}

}  // namespace
}  // namespace gpufs
