// The block grid and queue alone: a grid's counts as blocks are sent, land and fail, and
// the order the queue hands runs out in (demand first come, split around blocks in
// flight; then the oldest load's queued blocks, a bounded run at a time).
#include "cache/load/block_loads.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace gpufs {
namespace {

struct Load {
  BlockGrid grid;
  bool failed = false;
};
using LoadRun = BlockRun<Load>;

std::shared_ptr<Load> MakeLoad(uint64_t bytes, size_t block) {
  auto load = std::make_shared<Load>();
  load->grid.Assign(LoadSpan{.length = bytes}, block);
  return load;
}

TEST(BlockGrid, CountsBlocksAsTheyAreSentLandAndFail) {
  auto load = MakeLoad(10, 4);  // blocks of 4, 4 and 2 bytes
  BlockGrid& grid = load->grid;
  ASSERT_EQ(grid.size(), 3u);
  grid.Send(0, 2);
  EXPECT_EQ(grid.reads, 1u);
  EXPECT_EQ(grid.blocks[1], BlockState::kInFlight);
  grid.Land(0, 2);
  EXPECT_TRUE(grid.Landed(0, 2));
  EXPECT_FALSE(grid.AllLanded());
  grid.blocks[2] = BlockState::kFailed;
  grid.failed = 1;
  EXPECT_TRUE(BlockGrid::Demandable(grid.blocks[2]));
  grid.Send(2, 1);  // sending a failed block again takes it off the failed count
  EXPECT_EQ(grid.failed, 0u);
  grid.Land(2, 1);
  EXPECT_TRUE(grid.AllLanded());
  EXPECT_FALSE(BlockGrid::Demandable(BlockState::kLanded));
}

TEST(BlockQueue, DemandsGoFirstComeSplitAroundBlocksInFlight) {
  BlockQueue<Load> queue;
  auto a = MakeLoad(64, 8);
  auto b = MakeLoad(64, 8);
  a->grid.Send(3, 1);
  queue.Demand(LoadRun{b, 6, 2});
  queue.Demand(LoadRun{a, 1, 5});  // block 3 in flight: two runs, 1-2 and 4-5
  std::vector<std::pair<Load*, std::pair<uint32_t, uint32_t>>> sent;
  queue.TakeDemands([] { return true; },
                    [&](const LoadRun& run) {
                      sent.push_back({run.load.get(), {run.first, run.count}});
                    });
  ASSERT_EQ(sent.size(), 3u);
  EXPECT_EQ(sent[0].first, b.get());
  EXPECT_EQ(sent[0].second, std::make_pair(6u, 2u));
  EXPECT_EQ(sent[1].second, std::make_pair(1u, 2u));
  EXPECT_EQ(sent[2].second, std::make_pair(4u, 2u));
  EXPECT_FALSE(queue.HasDemands());
}

TEST(BlockQueue, DemandsWaitWhileThereIsNoRoomAndAFailedLoadsAreSkipped) {
  BlockQueue<Load> queue;
  auto a = MakeLoad(32, 8);
  auto b = MakeLoad(32, 8);
  b->failed = true;
  queue.Demand(LoadRun{b, 0, 1});
  queue.Demand(LoadRun{a, 0, 1});
  int room = 0;
  int sent = 0;
  queue.TakeDemands([&] { return room > 0; }, [&](const LoadRun&) { ++sent; });
  EXPECT_EQ(sent, 0);
  EXPECT_TRUE(queue.HasDemands());
  room = 1;
  queue.TakeDemands([&] { return room > 0; },
                    [&](const LoadRun& run) {
                      ++sent;
                      EXPECT_EQ(run.load, a);
                    });
  EXPECT_EQ(sent, 1);
}

TEST(BlockQueue, PrefetchHandsOutTheOldestLoadsQueuedRunsUpToTheBound) {
  BlockQueue<Load> queue;
  auto a = MakeLoad(40, 8);  // 5 blocks
  auto b = MakeLoad(16, 8);
  queue.Add(a);
  queue.Add(b);
  queue.Add(a);        // already in the order: not twice
  a->grid.Send(2, 1);  // a demand took block 2
  auto next = [&] {
    LoadRun run = queue.NextPrefetch(2);
    if (run.load) run.load->grid.Send(run.first, run.count);
    return run;
  };
  LoadRun r = next();
  EXPECT_EQ(r.load, a);
  EXPECT_EQ(std::make_pair(r.first, r.count), std::make_pair(0u, 2u));
  r = next();  // block 2 is in flight: the next run is 3-4
  EXPECT_EQ(std::make_pair(r.first, r.count), std::make_pair(3u, 2u));
  r = next();
  EXPECT_EQ(r.load, b);
  EXPECT_EQ(std::make_pair(r.first, r.count), std::make_pair(0u, 2u));
  EXPECT_EQ(next().load, nullptr);
  EXPECT_FALSE(a->grid.queued);  // done loads leave the order
  EXPECT_TRUE(queue.TakeLoads().empty());
}

}  // namespace
}  // namespace gpufs
