// The group cache's hot path: hits pinned without the cache's lock, while other threads
// load and evict. Run under the sanitizer builds too (a race here is a wrong byte served).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "cache/group_cache.h"
#include "dataset/catalog_builder.h"
#include "source/local_source.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

constexpr uint32_t kGroups = 16;
constexpr uint32_t kMembers = 8;
constexpr size_t kMemberBytes = 4096;
constexpr size_t kGroupBytes = kMembers * kMemberBytes;

// A policy that checks consume-once's promise as it goes: every group it is told was
// evicted had all of its members served this epoch. Called one at a time (the cache locks
// its policy), and owned by the cache.
class ConsumedOnly : public EvictionPolicy {
 public:
  ConsumedOnly(GroupSizes sizes, size_t files) : inner_(sizes, files), served_(sizes.size()) {}
  std::string_view name() const override { return inner_.name(); }
  void Admitted(uint32_t group) override { inner_.Admitted(group); }
  void Served(uint32_t group, uint32_t file) override {
    inner_.Served(group, file);
    ++served_[group];
  }
  void Evicted(uint32_t group) override {
    if (served_[group] < kMembers) ++evicted_unconsumed_;
    ++evicted_;
    inner_.Evicted(group);
  }
  bool Wanted(uint32_t group) const override { return inner_.Wanted(group); }
  std::optional<uint32_t> Victim(const std::vector<bool>& busy) const override {
    return inner_.Victim(busy);
  }
  uint32_t epoch() const override { return inner_.epoch(); }
  uint64_t served_this_epoch() const override { return inner_.served_this_epoch(); }

  // Read once the readers are done.
  uint32_t evicted_ = 0;
  uint32_t evicted_unconsumed_ = 0;

 private:
  ConsumeOncePolicy inner_;
  std::vector<uint32_t> served_;
};

class HotPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"c"};
    for (uint32_t g = 0; g < kGroups; ++g) {
      const std::string blob = "blob-" + std::to_string(g);
      std::string bytes;
      for (uint32_t m = 0; m < kMembers; ++m) {
        const std::string name = Name(g, m);
        spec.members.push_back(MemberSpec{name, 0, g, bytes.size(), kMemberBytes, 0, 0});
        for (size_t i = 0; i < kMemberBytes; ++i) {
          bytes += static_cast<char>('a' + (g * 7 + m * 3 + i) % 26);
        }
        contents_[name] = bytes.substr(bytes.size() - kMemberBytes);
      }
      spec.groups.push_back(GroupSpec{blob, 0, bytes.size(), 0});
      std::ofstream(dir_.path() / blob, std::ios::binary) << bytes;
    }
    catalog_ = std::make_unique<Catalog>(std::move(*CatalogFromSpec(spec)));
    blobs_ = std::make_unique<BlobFiles>(dir_.path(), catalog_->blobs());
    source_ = std::make_unique<LocalSource>(*blobs_, engine_);
  }

  // Room for `groups` groups, no prefetch.
  void MakeCache(uint32_t groups, std::unique_ptr<EvictionPolicy> policy) {
    arena_ = std::move(*PinnedArena::Create(groups * kGroupBytes));
    cache_ = std::make_unique<GroupCache>(*catalog_, *source_, *arena_, std::move(policy),
                                          CacheOptions{"", 0, 0});
  }

  static std::string Name(uint32_t g, uint32_t m) {
    return "c/" + std::to_string(g) + "-" + std::to_string(m);
  }
  NodeId Node(uint32_t g, uint32_t m) { return *catalog_->FindPath(Name(g, m)); }

  // Reads the member whole and compares it while it is still pinned; false on a mismatch.
  bool ReadsRight(uint32_t g, uint32_t m) {
    auto bytes = cache_->Read(Node(g, m), 0, 1 << 20);
    return bytes.ok() && std::string_view(bytes->data(), bytes->size()) == contents_[Name(g, m)];
  }

  TempDir dir_;
  std::map<std::string, std::string> contents_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<BlobFiles> blobs_;
  PreadEngine engine_{2};
  std::unique_ptr<LocalSource> source_;
  std::unique_ptr<PinnedArena> arena_;
  std::unique_ptr<GroupCache> cache_;
};

TEST_F(HotPathTest, AGroupPinnedByAHitIsNotEvictedUntilReleased) {
  MakeCache(1, MakePolicy("lru", GroupSizes(kGroups, kMembers), kGroups * kMembers));
  ASSERT_TRUE(ReadsRight(0, 0));                     // a miss: loads group 0
  auto held = cache_->Read(Node(0, 1), 0, 1 << 20);  // a hit, pinned in its slot
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(cache_->counters().hits.load(), 1u);
  ASSERT_TRUE(ReadsRight(1, 0));  // no room: group 0 is pinned, so the member alone
  EXPECT_EQ(cache_->counters().member_reads.load(), 1u);
  EXPECT_EQ(cache_->counters().evictions.load(), 0u);
  EXPECT_TRUE(cache_->Resident(0));
  EXPECT_EQ(std::string_view(held->data(), held->size()), contents_[Name(0, 1)]);
  held = CachedBytes{};  // unpinned
  ASSERT_TRUE(ReadsRight(1, 1));
  EXPECT_EQ(cache_->counters().evictions.load(), 1u);
  EXPECT_FALSE(cache_->Resident(0));
  EXPECT_TRUE(cache_->Resident(1));
}

TEST_F(HotPathTest, ManyReadersWhileGroupsAreLoadedAndEvictedGetTheirOwnBytes) {
  MakeCache(3, MakePolicy("lru", GroupSizes(kGroups, kMembers), kGroups * kMembers));
  constexpr unsigned kThreads = 8;
  constexpr unsigned kReadsEach = 3000;
  std::atomic<unsigned> wrong{0};
  std::vector<std::thread> readers;
  for (unsigned t = 0; t < kThreads; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 random(t);
      for (unsigned i = 0; i < kReadsEach; ++i) {
        // Mostly a few hot groups, so hits race with the evictions the rest cause.
        const uint32_t g = random() % 4 == 0 ? random() % kGroups : random() % 4;
        if (!ReadsRight(g, random() % kMembers)) ++wrong;
      }
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(cache_->counters().hits.load(), 0u);
  EXPECT_GT(cache_->counters().evictions.load(), 0u);
  EXPECT_LE(arena_->used(), arena_->capacity());
  EXPECT_EQ(cache_->counters().bytes_served.load(), uint64_t{kThreads} * kReadsEach * kMemberBytes);
}

TEST_F(HotPathTest, ConsumeOnceEvictsOnlyConsumedGroupsUnderConcurrentReaders) {
  auto owned = std::make_unique<ConsumedOnly>(GroupSizes(kGroups, kMembers), kGroups * kMembers);
  ConsumedOnly& policy = *owned;
  MakeCache(3, std::move(owned));
  // Every member once: one epoch. Two readers share each group (even and odd members, each
  // in its own random order), two groups at a time, so groups are consumed, and evicted
  // for the next ones, while hits on other groups go on.
  constexpr unsigned kThreads = 4;
  std::atomic<unsigned> wrong{0};
  std::vector<std::thread> readers;
  for (unsigned t = 0; t < kThreads; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937 random(t);
      for (uint32_t g = t / 2; g < kGroups; g += 2) {
        std::vector<uint32_t> members;
        for (uint32_t m = t % 2; m < kMembers; m += 2) members.push_back(m);
        std::shuffle(members.begin(), members.end(), random);
        for (uint32_t m : members) {
          if (!ReadsRight(g, m)) ++wrong;
        }
      }
    });
  }
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  const nlohmann::json stats = cache_->Stats();
  // Every file read once ends epoch 1: each was heard exactly once, and epoch 2 is next.
  EXPECT_EQ(stats["epoch"], 2);
  EXPECT_EQ(stats["epoch_files_served"], 0);
  EXPECT_EQ(stats["stall"]["last"]["files"], kGroups * kMembers);
  EXPECT_EQ(cache_->counters().bytes_served.load(), uint64_t{kGroups} * kMembers * kMemberBytes);
  // No thread of the cache's runs now (no prefetch), so its policy can be read.
  EXPECT_EQ(policy.evicted_, cache_->counters().evictions.load());
  // Groups were consumed and evicted for the next ones, unless the readers of each group
  // drifted so far apart that no group was ever consumed when a new one needed its room:
  // then the files of groups not admitted were read alone.
  EXPECT_TRUE(policy.evicted_ > 0 || cache_->counters().member_reads.load() > 0);
  EXPECT_EQ(policy.evicted_unconsumed_, 0u);
}

TEST(StripedCounter, SumsWhatEveryThreadAdded) {
  StripedCounter counter;
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 20; ++t) {  // more threads than stripes: some share one
    threads.emplace_back([&counter, t] {
      for (unsigned i = 0; i < 1000; ++i) {
        ++counter;
        counter += t;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter.load(), 20u * 1000 + 1000u * (19 * 20 / 2));
}

}  // namespace
}  // namespace gpufs
