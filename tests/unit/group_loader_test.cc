// The GroupLoader alone: which reads go to the source and when (demand first and beside
// the window, prefetch a piece at a time within it, blocks in flight joined), what a
// completion reports, failed runs tried again, and the adaptive window.
#include "cache/load/group_loader.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <thread>

namespace gpufs {
namespace {

struct Load {
  BlockGrid grid;
  bool failed = false;
};
using Loader = GroupLoader<Load>;

// Holds every read until the test answers it, so the test sees what is in flight.
class HeldSource : public BlobSource {
 public:
  explicit HeldSource(std::string blob) : blob_(std::move(blob)) {}
  std::string_view kind() const override { return "held"; }
  size_t blob_count() const override { return 1; }
  std::string Describe(uint32_t) const override { return "held://0"; }
  const BlobInfo* Expected(uint32_t) const override { return nullptr; }
  std::string Identity(uint32_t) const override { return "held"; }
  nlohmann::json Stats() const override { return nlohmann::json::object(); }
  void Submit(ReadKind, std::vector<BlobRead> reads) override {
    for (BlobRead& r : reads) held.push_back(std::move(r));
  }
  // Answers the oldest held read (or the one at `index`) with the blob's bytes, at most
  // `most` of them.
  void Answer(size_t index = 0, size_t most = SIZE_MAX) {
    BlobRead r = std::move(held.at(index));
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(index));
    const size_t n = std::min({r.length, most, blob_.size() - std::min(blob_.size(), r.offset)});
    std::memcpy(r.buffer, blob_.data() + r.offset, n);
    r.done(n);
  }
  void Refuse(size_t index = 0) {
    BlobRead r = std::move(held.at(index));
    held.erase(held.begin() + static_cast<std::ptrdiff_t>(index));
    r.done(Fail(EIO, "cannot read held://0: refused"));
  }
  std::deque<BlobRead> held;

 private:
  std::string blob_;
};

// An owner as the group cache and the stager are: a lock, the loader, and what each
// completion reported.
class Owner {
 public:
  Owner(std::string blob, LoaderOptions options)
      : source_(std::move(blob)),
        loader_(options, LoaderCounts{&demand_reads, &bytes},
                [this](const Loader::Run& run, bool demand, Result<size_t> got) {
                  std::unique_lock lock(mu_);
                  landings.push_back(loader_.Complete(run, demand, got));
                  if (landings.back() == Landing::kFailed) loader_.FailRun(run, requeue);
                  loader_.Retire();
                  loader_.Pump(source_, lock, [] { return true; });
                }) {}

  std::shared_ptr<Load> Start(uint64_t start, uint64_t length, uint64_t need, char* buffer) {
    auto load = std::make_shared<Load>();
    std::lock_guard lock(mu_);
    loader_.Start(load, LoadSpan{0, start, length, need, buffer});
    return load;
  }
  void Demand(const std::shared_ptr<Load>& load, uint32_t first, uint32_t last) {
    std::lock_guard lock(mu_);
    loader_.Demand(load, first, last);
  }
  void Pump() {
    std::unique_lock lock(mu_);
    loader_.Pump(source_, lock, [] { return true; });
  }
  HeldSource& source() { return source_; }
  Loader& loader() { return loader_; }

  std::vector<Landing> landings;
  bool requeue = true;
  std::atomic<uint64_t> demand_reads{0}, bytes{0};

 private:
  std::mutex mu_;
  HeldSource source_;
  Loader loader_;
};

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + i % 26);
  return s;
}

TEST(GroupLoader, PrefetchSendsPiecesOfTheOldestLoadWithinTheWindow) {
  const std::string blob = Bytes(64);
  Owner owner(blob, {.block = 4, .piece = 8, .window_most = 2, .floor = 2});
  std::string a(32, '\0'), b(32, '\0');
  owner.Start(0, 32, 32, a.data());
  owner.Start(32, 32, 32, b.data());
  owner.Pump();
  auto& held = owner.source().held;
  ASSERT_EQ(held.size(), 2u);  // the window
  EXPECT_EQ(held[0].offset, 0u);
  EXPECT_EQ(held[0].length, 8u);  // a piece: two blocks
  EXPECT_EQ(held[1].offset, 8u);
  EXPECT_FALSE(held[0].urgent);
  // Each completion makes room for the next piece, the first load's before the second's.
  while (!held.empty()) owner.source().Answer();
  EXPECT_EQ(a, blob.substr(0, 32));
  EXPECT_EQ(b, blob.substr(32, 32));
  EXPECT_EQ(owner.bytes.load(), 64u);
  EXPECT_EQ(owner.landings.size(), 8u);
  EXPECT_TRUE(owner.loader().idle());
}

TEST(GroupLoader, DemandGoesBesideAFullWindowAndJoinsReadsInFlight) {
  const std::string blob = Bytes(64);
  Owner owner(blob, {.block = 4, .piece = 8, .window_most = 1, .floor = 1});
  std::string a(64, '\0');
  auto load = owner.Start(0, 64, 64, a.data());
  owner.Pump();
  ASSERT_EQ(owner.source().held.size(), 1u);  // blocks 0-1, prefetch
  owner.Demand(load, 1, 5);  // block 1 in flight: joined; blocks 2-5 sent, one request
  owner.Pump();
  auto& held = owner.source().held;
  ASSERT_EQ(held.size(), 2u);
  EXPECT_TRUE(held[1].urgent);
  EXPECT_EQ(held[1].offset, 8u);
  EXPECT_EQ(held[1].length, 16u);
  EXPECT_EQ(owner.demand_reads.load(), 1u);
  while (!held.empty()) owner.source().Answer();
  EXPECT_EQ(a, blob);
}

TEST(GroupLoader, DemandReadsInFlightAreBoundedWhenAsked) {
  const std::string blob = Bytes(64);
  Owner owner(blob, {.block = 4, .window_most = 1, .floor = 1, .demand_most = 1});
  std::string a(64, '\0');
  auto load = owner.Start(0, 64, 64, a.data());
  owner.Demand(load, 2, 2);
  owner.Demand(load, 6, 6);
  owner.Pump();
  // One demand read; the second waits its turn. Prefetch keeps its floor: the queued run
  // ahead of the block in flight (no piece bound: as long as the run goes).
  auto& held = owner.source().held;
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[0].offset, 8u);
  EXPECT_TRUE(held[0].urgent);
  EXPECT_EQ(held[1].offset, 0u);
  EXPECT_EQ(held[1].length, 8u);
  EXPECT_EQ(owner.demand_reads.load(), 1u);
  owner.source().Answer(0);  // room for the second demand
  EXPECT_EQ(owner.demand_reads.load(), 2u);
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(held[1].offset, 24u);
  EXPECT_TRUE(held[1].urgent);
  while (!held.empty()) owner.source().Answer();
  EXPECT_EQ(a, blob);
}

TEST(GroupLoader, ACompletionSaysWhatLandedAndZerosPastTheBlobsEnd) {
  const std::string blob = Bytes(10);
  Owner owner(blob, {.block = 8, .window_most = 4, .floor = 4});
  std::string a(16, 'x');
  auto load = owner.Start(0, 16, 10, a.data());  // needs 10 bytes; 6 lie past the end
  owner.Pump();
  while (!owner.source().held.empty()) owner.source().Answer();
  EXPECT_TRUE(load->grid.AllLanded());
  EXPECT_EQ(a, blob + std::string(6, '\0'));

  std::string c(16, 'x');
  auto short_load = owner.Start(0, 16, 16, c.data());  // needs 16: the blob ends early
  owner.Pump();
  owner.source().Answer();
  ASSERT_EQ(owner.landings.back(), Landing::kShort);
  EXPECT_FALSE(short_load->grid.AllLanded());
}

TEST(GroupLoader, AFailedRunIsTriedAgainOrLeftForADemand) {
  const std::string blob = Bytes(16);
  Owner owner(blob, {.block = 8, .piece = 8, .window_most = 1, .floor = 1});
  std::string a(16, '\0');
  auto load = owner.Start(0, 16, 16, a.data());
  owner.Pump();
  owner.source().Refuse();  // requeued: prefetch sends block 0 again, before block 1
  ASSERT_EQ(owner.landings.back(), Landing::kFailed);
  ASSERT_EQ(owner.source().held.size(), 1u);
  EXPECT_EQ(owner.source().held[0].offset, 0u);
  owner.requeue = false;
  owner.source().Refuse();  // left kFailed; prefetch goes on with block 1
  EXPECT_EQ(load->grid.blocks[0], BlockState::kFailed);
  EXPECT_EQ(load->grid.failed, 1u);
  ASSERT_EQ(owner.source().held.size(), 1u);
  EXPECT_EQ(owner.source().held[0].offset, 8u);
  owner.source().Answer();
  owner.Demand(load, 0, 0);  // a reader asks for the failed block again
  owner.Pump();
  ASSERT_EQ(owner.source().held.size(), 1u);
  EXPECT_TRUE(owner.source().held[0].urgent);
  owner.source().Answer();
  EXPECT_TRUE(load->grid.AllLanded());
  EXPECT_EQ(load->grid.failed, 0u);
  EXPECT_EQ(a, blob);
}

TEST(GroupLoader, AFailedLoadsLateReadsAreDropped) {
  Owner owner(Bytes(16), {.block = 8, .piece = 8, .window_most = 2, .floor = 2});
  std::string a(16, '\0');
  auto load = owner.Start(0, 16, 16, a.data());
  owner.Pump();
  load->failed = true;  // the owner failed it meanwhile
  owner.source().Answer();
  EXPECT_EQ(owner.landings.back(), Landing::kDropped);
  EXPECT_EQ(owner.bytes.load(), 0u);
  owner.source().Answer();
  EXPECT_TRUE(owner.loader().idle());
}

TEST(GroupLoader, TheAdaptiveWindowGrowsWhileNoReaderWaitsAndShrinksWhenDemandIsSlow) {
  Owner owner(Bytes(1 << 12),
              {.block = 8, .piece = 8, .window_most = 16, .floor = 2, .adapt = true});
  std::string a(1 << 12, '\0');
  auto load = owner.Start(0, a.size(), a.size(), a.data());
  owner.Pump();
  EXPECT_EQ(owner.loader().window(), 2u);  // starts at its floor
  EXPECT_EQ(owner.source().held.size(), 2u);
  for (int i = 0; i < 6; ++i) owner.source().Answer();
  EXPECT_EQ(owner.loader().window(), 8u);
  EXPECT_EQ(owner.source().held.size(), 8u);
  // A fast demand read sets the least latency; one 10 times slower shrinks the window.
  owner.Demand(load, 500, 500);
  owner.Pump();
  owner.source().Answer(owner.source().held.size() - 1);
  const unsigned before = owner.loader().window();
  owner.Demand(load, 501, 501);
  owner.Pump();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  owner.source().Answer(owner.source().held.size() - 1);
  EXPECT_EQ(owner.loader().window(), std::max(2u, before * 3 / 4));
  while (!owner.source().held.empty()) owner.source().Answer();
}

TEST(GroupLoader, StopHandsBackTheLoadsNotYetSent) {
  Owner owner(Bytes(64), {.block = 8, .piece = 8, .window_most = 1, .floor = 1});
  std::string a(32, '\0'), b(32, '\0');
  auto first = owner.Start(0, 32, 32, a.data());
  auto second = owner.Start(32, 32, 32, b.data());
  owner.Pump();
  std::deque<std::shared_ptr<Load>> unsent = owner.loader().Stop();
  ASSERT_EQ(unsent.size(), 2u);
  EXPECT_EQ(unsent[0], first);
  EXPECT_FALSE(owner.loader().idle());  // a read is still in flight
}

}  // namespace
}  // namespace gpufs
