// The group cache's side of the disk tier, directly: the names of the groups' copies, what
// a copy read back is checked against, members served from a copy or a staging, and the
// stager it runs.
#include "cache/cache_tier.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cache/tier/tier_stat.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "tests/unit/fake_source.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

namespace fs = std::filesystem;

constexpr size_t kLead = 5000;    // bytes of each blob before its group
constexpr size_t kMember = 5000;  // three members a group
constexpr size_t kGroup = 3 * kMember;
const std::string kDataset = "t-0123456789abcdef";

// A fake source with a chosen alignment, whose blobs in `unknown` have no identity.
class Source : public FakeSource {
 public:
  Source(std::vector<std::string> blobs, size_t alignment, std::set<uint32_t> unknown)
      : FakeSource(std::move(blobs)), alignment_(alignment), unknown_(std::move(unknown)) {}
  size_t Alignment() const override { return alignment_; }
  std::string Identity(uint32_t blob) const override {
    return unknown_.count(blob) ? "" : FakeSource::Identity(blob);
  }

 private:
  const size_t alignment_;
  const std::set<uint32_t> unknown_;
};

struct Free {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, Free>;

// `bytes` at a buffer the tier may read and write directly.
Buffer Aligned(const std::string& bytes) {
  const size_t room = (bytes.size() + DiskTier::kAlign - 1) / DiskTier::kAlign * DiskTier::kAlign;
  Buffer b(static_cast<char*>(std::aligned_alloc(DiskTier::kAlign, room)));
  std::memset(b.get(), 0, room);
  std::memcpy(b.get(), bytes.data(), bytes.size());
  return b;
}

struct Shape {
  bool sha256 = false;        // the index has SHA-256 digests
  bool checksums = false;     // the index has members' checksums, checked (MemberChecks)
  bool whole_groups = false;  // a miss stages its group
  size_t alignment = 1;
  std::set<uint32_t> unknown;  // blobs with no identity
};

// Two groups, each alone in its blob after kLead other bytes, of three members.
class CacheTierTest : public ::testing::Test {
 protected:
  void Make(Shape setup) {
    cache_tier_.reset();  // before what it uses
    checks_.reset();
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"c"};
    spec.has_sha256 = setup.sha256;
    spec.has_checksums = setup.checksums;
    std::vector<std::string> blobs;
    for (uint32_t g = 0; g < 2; ++g) {
      std::string bytes(kLead, 'L');
      for (uint32_t m = 0; m < 3; ++m) {
        const std::string path = "c/" + std::to_string(g) + "-" + std::to_string(m);
        std::string member(kMember, '\0');
        for (size_t i = 0; i < kMember; ++i)
          member[i] = static_cast<char>('a' + (g * 3 + m + i) % 26);
        MemberSpec ms{path, 0, g, bytes.size(), kMember, ChecksumOf(member.data(), kMember), 0};
        ms.sha256 = Sha256Of(member.data(), kMember);
        spec.members.push_back(ms);
        contents_[path] = member;
        bytes += member;
      }
      spec.groups.push_back(GroupSpec{"blob-" + std::to_string(g), kLead, kGroup, 0});
      blobs.push_back(bytes);
    }
    auto catalog = CatalogFromSpec(spec);
    ASSERT_TRUE(catalog.ok()) << catalog.error().message;
    catalog_ = std::make_unique<Catalog>(std::move(*catalog));
    source_ = std::make_unique<Source>(blobs, setup.alignment, setup.unknown);
    auto tier = DiskTier::Open(DiskTierOptions{dir_.path(), kDataset, 0, 0, true});
    ASSERT_TRUE(tier.ok()) << tier.error().message;
    tier_ = std::move(*tier);
    if (setup.checksums) checks_ = std::make_unique<MemberChecks>(catalog_->file_count());
    CacheOptions options;
    options.whole_groups = setup.whole_groups;
    cache_tier_ =
        std::make_unique<CacheTier>(*catalog_, *source_, *tier_, options, 64 << 20, checks_.get(),
                                    counters_, [this](uint32_t group, const char* bytes) {
                                      std::lock_guard lock(mu_);
                                      checked_[group] = std::string(bytes, kGroup);
                                      return true;
                                    });
  }

  // The span a load of `g` reads, from the blob.
  std::string Span(uint32_t g) {
    uint64_t start = 0;
    const size_t length = GroupSpan(*catalog_, *source_, g, &start);
    std::string span = source_->blob(g).substr(start, length);
    span.resize(length, '\0');  // past the blob's end: zeros, as a load leaves them
    return span;
  }
  // The name the copy of `g` is known by, made here from what identifies its bytes.
  std::string CopyName(uint32_t g) {
    uint64_t start = 0;
    const size_t length = GroupSpan(*catalog_, *source_, g, &start);
    return TierFileName(g, source_->Describe(g), source_->Identity(g), start, length);
  }
  // Keeps `g`'s span under the name worked out here, as a write-back would: the tier side
  // finds it only where it names the copy the same way.
  void Keep(uint32_t g) {
    const std::string span = Span(g);
    Buffer bytes = Aligned(span);
    ASSERT_TRUE(tier_->Write(CopyName(g), bytes.get(), span.size()));
  }
  // Replaces the copy of `g` with its span, one byte of its second member changed, under
  // valid block sums: as someone who could write the folder could.
  void Plant(uint32_t g) {
    std::string span = Span(g);
    uint64_t start = 0;
    GroupSpan(*catalog_, *source_, g, &start);
    span[kLead - start + kMember + 17] ^= 0x20;
    fs::remove(dir_.path() / kDataset / CopyName(g));
    Buffer bytes = Aligned(span);
    ASSERT_TRUE(tier_->Write(CopyName(g), bytes.get(), span.size()));
  }
  NodeId File(const std::string& path) { return *catalog_->FindPath(path); }
  uint64_t TierStat(const char* key) { return tier_->Stats()[key].get<uint64_t>(); }
  size_t FilesInFolder() {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir_.path() / kDataset)) n += e.is_regular_file();
    return n;
  }

  TempDir dir_;
  std::map<std::string, std::string> contents_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<Source> source_;
  std::unique_ptr<DiskTier> tier_;
  CacheCounters counters_;
  std::unique_ptr<MemberChecks> checks_;
  std::mutex mu_;
  std::map<uint32_t, std::string> checked_;  // guarded by mu_: what the stager's check saw
  std::unique_ptr<CacheTier> cache_tier_;    // last: it uses all of the above
};

TEST_F(CacheTierTest, AGroupsSpanIsRoundedOutToTheSourcesAlignment) {
  Make(Shape{.alignment = 4096});
  uint64_t start = 0;
  EXPECT_EQ(GroupSpan(*catalog_, *source_, 1, &start), 4096u * 4);  // to 20,480
  EXPECT_EQ(start, 4096u);
  Make(Shape{.alignment = 1});
  EXPECT_EQ(GroupSpan(*catalog_, *source_, 1, &start), kGroup);
  EXPECT_EQ(start, kLead);
}

TEST_F(CacheTierTest, ACopyIsNamedByItsBlobsIdentityAndSpanAndListedInGroups) {
  Make(Shape{.alignment = 4096});
  EXPECT_EQ(cache_tier_->Groups(), (std::vector<bool>{false, false}));
  Keep(1);
  EXPECT_EQ(cache_tier_->Groups(), (std::vector<bool>{false, true}));
  EXPECT_TRUE(tier_->Present(TierFileName(1, "fake://1", "fake 1 v0", 4096, 4 * 4096)));
  EXPECT_EQ(FilesInFolder(), 1u);
  // A new version of the blob names another copy: the old one is not its.
  source_->Bump(1);
  CacheTier remounted(*catalog_, *source_, *tier_, CacheOptions{}, 64 << 20, nullptr, counters_,
                      [](uint32_t, const char*) { return true; });
  EXPECT_EQ(remounted.Groups(), (std::vector<bool>{false, false}));
  EXPECT_EQ(cache_tier_->Groups(), (std::vector<bool>{false, true}));
}

// Write-backs run in the background; each says when its bytes may go, and a stop returns
// once those taken are written.
TEST_F(CacheTierTest, WriteBacksKeepTheSpansAndSayWhenWritten) {
  Make(Shape{.alignment = 4096});
  const std::string spans[] = {Span(0), Span(1)};
  Buffer bytes[] = {Aligned(spans[0]), Aligned(spans[1])};
  std::atomic<int> written{0};
  for (uint32_t g = 0; g < 2; ++g) {
    ASSERT_TRUE(cache_tier_->WriteBack(g, bytes[g].get(), spans[g].size(), [&] { ++written; }));
  }
  cache_tier_->StopWrites();
  EXPECT_EQ(written.load(), 2);
  EXPECT_EQ(cache_tier_->Groups(), (std::vector<bool>{true, true}));
  EXPECT_TRUE(tier_->Present(CopyName(0)));
  EXPECT_EQ(TierStat(tier_stat::kWriteBytes), spans[0].size() + spans[1].size());
  EXPECT_FALSE(cache_tier_->WriteBack(0, bytes[0].get(), spans[0].size(), [&] { ++written; }));
  EXPECT_EQ(written.load(), 2);
  // What was kept reads back through the tier side.
  Buffer target = Aligned(std::string(spans[1].size(), '\0'));
  ASSERT_TRUE(
      cache_tier_->ReadGroup(1, target.get(), spans[1].size(), target.get() + kLead - 4096));
  EXPECT_EQ(std::string(target.get(), spans[1].size()), spans[1]);
}

TEST_F(CacheTierTest, AMemberIsServedFromItsGroupsCopyAlone) {
  Make(Shape{.alignment = 4096});
  Keep(1);
  const size_t calls = source_->calls().size();
  ServedFrom from = ServedFrom::kMemory;
  auto got = cache_tier_->ReadMember(File("c/1-1"), 100, 2000, &from);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->ok()) << got->error().message;
  EXPECT_EQ(std::string((*got)->data(), (*got)->size()), contents_["c/1-1"].substr(100, 2000));
  EXPECT_EQ(from, ServedFrom::kDiskTier);
  EXPECT_EQ(source_->calls().size(), calls);
  EXPECT_EQ(counters_.member_reads.load(), 1u);
  EXPECT_EQ(counters_.bytes_served.load(), 2000u);
  EXPECT_EQ(TierStat(tier_stat::kSliceHits), 1u);
  EXPECT_EQ(cache_tier_->read_bytes(), 2000u);
}

TEST_F(CacheTierTest, WithoutACopyOrStagingNothingIsServedAndNothingFetched) {
  Make(Shape{.whole_groups = false});
  ServedFrom from = ServedFrom::kMemory;
  EXPECT_FALSE(cache_tier_->ReadMember(File("c/0-0"), 0, 100, &from).has_value());
  EXPECT_FALSE(cache_tier_->Staging(0));
  Buffer target = Aligned(std::string(kGroup, '\0'));
  EXPECT_FALSE(cache_tier_->ReadGroup(0, target.get(), kGroup, target.get()));
  EXPECT_TRUE(source_->calls().empty());
  EXPECT_EQ(TierStat(tier_stat::kMisses), 2u);
  EXPECT_EQ(counters_.member_reads.load(), 0u);
}

TEST_F(CacheTierTest, ReadGroupFillsTheTargetFromACheckedCopy) {
  Make(Shape{.sha256 = true, .alignment = 4096});
  Keep(0);
  const std::string span = Span(0);
  Buffer target = Aligned(std::string(span.size(), '\0'));
  ASSERT_TRUE(cache_tier_->ReadGroup(0, target.get(), span.size(), target.get() + kLead - 4096));
  EXPECT_EQ(std::string(target.get(), span.size()), span);
  EXPECT_EQ(TierStat(tier_stat::kHits), 1u);
  EXPECT_EQ(TierStat(tier_stat::kHashMismatches), 0u);
}

TEST_F(CacheTierTest, AGroupOfAnUnknownBlobHasNoNameAndIsNeverKept) {
  Make(Shape{.whole_groups = true, .unknown = {1}});
  EXPECT_TRUE(cache_tier_->Keeps(0));
  EXPECT_FALSE(cache_tier_->Keeps(1));
  EXPECT_EQ(CopyName(1), "");
  Buffer bytes = Aligned(Span(1));
  bool ran = false;
  EXPECT_FALSE(cache_tier_->WriteBack(1, bytes.get(), kGroup, [&] { ran = true; }));
  cache_tier_->StopWrites();
  EXPECT_FALSE(ran);
  EXPECT_EQ(FilesInFolder(), 0u);
  EXPECT_EQ(cache_tier_->Groups(), (std::vector<bool>{false, false}));
  ServedFrom from = ServedFrom::kMemory;
  EXPECT_FALSE(cache_tier_->ReadMember(File("c/1-0"), 0, 100, &from).has_value());
  EXPECT_FALSE(cache_tier_->Staging(1));  // not staged either: it could not be kept
  EXPECT_TRUE(source_->calls().empty());
  Buffer target = Aligned(std::string(kGroup, '\0'));
  EXPECT_FALSE(cache_tier_->ReadGroup(1, target.get(), kGroup, target.get()));
}

TEST_F(CacheTierTest, AGroupCopyThatDoesNotMatchTheDigestsIsDeletedAndCounted) {
  Make(Shape{.sha256 = true});
  Plant(0);
  ASSERT_EQ(cache_tier_->Groups(), (std::vector<bool>{true, false}));
  Buffer target = Aligned(std::string(kGroup, '\0'));
  EXPECT_FALSE(cache_tier_->ReadGroup(0, target.get(), kGroup, target.get()));
  EXPECT_EQ(cache_tier_->Groups(), (std::vector<bool>{false, false}));
  EXPECT_EQ(TierStat(tier_stat::kHashMismatches), 1u);
  EXPECT_EQ(TierStat(tier_stat::kDamaged), 0u);  // its block sums were valid
  EXPECT_EQ(cache_tier_->Stats()[tier_stat::kHashMismatches], 1);
}

TEST_F(CacheTierTest, AMemberCopyThatDoesNotMatchItsDigestIsNotServedAndIsDeleted) {
  Make(Shape{.sha256 = true});
  Plant(1);
  ServedFrom from = ServedFrom::kMemory;
  EXPECT_FALSE(cache_tier_->ReadMember(File("c/1-1"), 0, 100, &from).has_value());
  EXPECT_FALSE(tier_->Present(CopyName(1)));
  EXPECT_EQ(TierStat(tier_stat::kHashMismatches), 1u);
  EXPECT_EQ(counters_.member_reads.load(), 0u);
}

// With digests a member read from a copy is hashed whole on its first read, then only the
// piece asked for is read.
TEST_F(CacheTierTest, AMemberIsHashedWholeOnceThenReadInPieces) {
  Make(Shape{.sha256 = true});
  Keep(0);
  ServedFrom from = ServedFrom::kMemory;
  for (uint64_t at : {100, 200, 4000}) {
    auto got = cache_tier_->ReadMember(File("c/0-1"), at, 50, &from);
    ASSERT_TRUE(got && got->ok()) << at;
    EXPECT_EQ(std::string((*got)->data(), (*got)->size()), contents_["c/0-1"].substr(at, 50));
  }
  EXPECT_EQ(cache_tier_->read_bytes(), kMember + 2 * 50);
  EXPECT_EQ(TierStat(tier_stat::kHashMismatches), 0u);
}

TEST_F(CacheTierTest, AMemberFailingItsChecksumIsAnErrorNotServed) {
  Make(Shape{.checksums = true});
  Plant(0);  // the second member changed, the first intact
  ServedFrom from = ServedFrom::kMemory;
  auto bad = cache_tier_->ReadMember(File("c/0-1"), 0, 100, &from);
  ASSERT_TRUE(bad.has_value());
  ASSERT_FALSE(bad->ok());
  EXPECT_EQ(bad->error().code, EIO);
  EXPECT_NE(bad->error().message.find("c/0-1"), std::string::npos) << bad->error().message;
  EXPECT_EQ(counters_.io_errors.load(), 1u);
  const uint32_t good = catalog_->FileIndex(File("c/0-0"));
  EXPECT_FALSE(checks_->Verified(good));
  auto got = cache_tier_->ReadMember(File("c/0-0"), 10, 100, &from);
  ASSERT_TRUE(got && got->ok());
  EXPECT_EQ(std::string((*got)->data(), (*got)->size()), contents_["c/0-0"].substr(10, 100));
  EXPECT_TRUE(checks_->Verified(good));
  EXPECT_EQ(counters_.member_reads.load(), 1u);
}

TEST_F(CacheTierTest, AMissStagesTheGroupAndTheNextReadFindsItOnDisk) {
  Make(Shape{.whole_groups = true, .alignment = 4096});
  ServedFrom from = ServedFrom::kMemory;
  auto got = cache_tier_->ReadMember(File("c/0-2"), 0, kMember, &from);
  ASSERT_TRUE(got && got->ok());
  EXPECT_EQ(std::string((*got)->data(), (*got)->size()), contents_["c/0-2"]);
  EXPECT_TRUE(from == ServedFrom::kSourceGroup || from == ServedFrom::kDiskTier);
  for (int i = 0; i < 2000 && cache_tier_->Staging(0); ++i) usleep(5000);  // a hang's bound
  ASSERT_FALSE(cache_tier_->Staging(0));
  EXPECT_EQ(cache_tier_->Groups(), (std::vector<bool>{true, false}));
  const nlohmann::json stats = cache_tier_->Stats();
  EXPECT_EQ(stats[tier_stat::kFills], 1);
  EXPECT_EQ(stats[tier_stat::kStaging][staging_stat::kStaged], 1);
  {
    // The check was given the group's own bytes, not its aligned span's.
    std::lock_guard lock(mu_);
    EXPECT_EQ(checked_[0], contents_["c/0-0"] + contents_["c/0-1"] + contents_["c/0-2"]);
  }
  const size_t calls = source_->calls().size();
  got = cache_tier_->ReadMember(File("c/0-0"), 0, 100, &from);
  ASSERT_TRUE(got && got->ok());
  EXPECT_EQ(std::string((*got)->data(), (*got)->size()), contents_["c/0-0"].substr(0, 100));
  EXPECT_EQ(from, ServedFrom::kDiskTier);
  EXPECT_EQ(source_->calls().size(), calls);
}

TEST_F(CacheTierTest, AStagingThatFailsLeavesTheMemberToTheCaller) {
  Make(Shape{.whole_groups = true});
  source_->Fail(0, EIO);
  ServedFrom from = ServedFrom::kMemory;
  EXPECT_FALSE(cache_tier_->ReadMember(File("c/0-0"), 0, 100, &from).has_value());
  for (int i = 0; i < 2000 && cache_tier_->Staging(0); ++i) usleep(5000);  // a hang's bound
  EXPECT_EQ(cache_tier_->Groups(), (std::vector<bool>{false, false}));
  EXPECT_EQ(cache_tier_->Stats()[tier_stat::kStaging][staging_stat::kFailed], 1);
  EXPECT_EQ(counters_.member_reads.load(), 0u);
}

}  // namespace
}  // namespace gpufs
