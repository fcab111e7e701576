// A mount's plan: gpufsd mount's options, as parsed, mapped to each component's
// configuration (the store, the disk tier, the engine, the cache) without opening anything,
// and the checks made before the dataset is listed.
#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include <fstream>

#include "cli/mount_plan.h"
#include "dataset/open/open_dataset.h"
#include "tests/unit/parse_mount_args.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

MountArgs Parse(std::vector<std::string> words) { return ParseMountArgs(std::move(words)); }

std::string ErrorOf(const Status& s) { return s ? "" : s.error().message; }

TEST(StoreUrl, AFolderGetsItsSlashAnArchiveOrAPresignedObjectDoesNot) {
  EXPECT_EQ(StoreUrl("http://h:8080/pack"), "http://h:8080/pack/");
  EXPECT_EQ(StoreUrl("http://h:8080/pack/"), "http://h:8080/pack/");
  EXPECT_EQ(StoreUrl("https://h/sets/train.tar"), "https://h/sets/train.tar");
  EXPECT_EQ(StoreUrl("https://h/sets/train%2Etar"), "https://h/sets/train%2Etar");  // decoded
  EXPECT_EQ(StoreUrl("https://h/sets/blob?X-Amz-Signature=ab"),
            "https://h/sets/blob?X-Amz-Signature=ab");
  EXPECT_EQ(StoreUrl("s3://bucket/imagenet"), "s3://bucket/imagenet/");
  EXPECT_EQ(StoreUrl("s3://bucket/sets/train.tar"), "s3://bucket/sets/train.tar");
  EXPECT_EQ(StoreUrl("s3://bucket/coco/train2017.zip"), "s3://bucket/coco/train2017.zip");
  EXPECT_EQ(StoreUrl("https://h/inat/train_val2019.tar.gz"), "https://h/inat/train_val2019.tar.gz");
  EXPECT_EQ(StoreUrl("https://h/shards/part-0001.TGZ"), "https://h/shards/part-0001.TGZ");
  // Refused once opened, saying what works, rather than looked for as a folder.
  EXPECT_EQ(StoreUrl("https://h/shards/part-0001.tar.zst"), "https://h/shards/part-0001.tar.zst");
  EXPECT_EQ(StoreUrl("https://h/sets/zipcodes"), "https://h/sets/zipcodes/");
  EXPECT_EQ(StoreUrl("s3://bucket"), "s3://bucket");
  // What the resolver refuses is passed on as typed, for it to say why.
  EXPECT_EQ(StoreUrl("s3:///x"), "s3:///x");
  EXPECT_EQ(StoreUrl("http://h/a%2Fb"), "http://h/a%2Fb");
}

TEST(StorePlan, EveryFieldTheOptionsOwnIsSetInOnePlace) {
  TempDir dir;
  const auto peers = dir.path() / "peers";
  std::ofstream(peers) << "http://10.0.0.1:8080\nhttp://10.0.0.2:8080\n";
  const MountArgs args =
      Parse({"--retry-seconds", "5", "--transfer-threads", "3", "--request-payer", "requester",
             "--no-verify-tls", "--connect-timeout", "1.5", "--peers-file", peers.string(),
             "--peer-block", "1MiB", "s3://bucket/set", "/mnt"});
  auto plan = PlanStore(args);
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->url, "s3://bucket/set/");
  remote::StoreConfig config;
  config.endpoint = "http://store";  // the resolver's, left as it is
  ApplyStorePlan(*plan, config);
  EXPECT_EQ(config.endpoint, "http://store");
  EXPECT_EQ(config.retry_budget, std::chrono::seconds(5));
  EXPECT_EQ(config.transfer_threads, 3u);
  EXPECT_TRUE(config.request_payer);
  EXPECT_FALSE(config.verify_tls);
  EXPECT_EQ(config.deadlines.connect, std::chrono::milliseconds(1500));
  EXPECT_EQ(config.peers.urls,
            (std::vector<std::string>{"http://10.0.0.1:8080", "http://10.0.0.2:8080"}));
  EXPECT_EQ(config.peers.block, 1u << 20);
  EXPECT_TRUE(config.peers.secret.empty());
}

TEST(StorePlan, DefaultsLeaveTheStoresOwnChoices) {
  auto plan = PlanStore(Parse({"http://h/pack/", "/mnt"}));
  ASSERT_TRUE(plan) << plan.error().message;
  remote::StoreConfig config;
  const unsigned threads = config.transfer_threads;
  ApplyStorePlan(*plan, config);
  EXPECT_EQ(config.transfer_threads, threads);
  EXPECT_TRUE(config.verify_tls);
  EXPECT_FALSE(config.request_payer);
  EXPECT_EQ(config.retry_budget, remote::StoreConfig{}.retry_budget);
  EXPECT_TRUE(config.peers.urls.empty());
}

TEST(StorePlan, ASecretWithoutPeersIsRefused) {
  auto plan = PlanStore(Parse({"--peer-secret-file", "/etc/s", "http://h/pack/", "/mnt"}));
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message,
            "cannot use --peer-secret-file /etc/s: there are no --peers to send it to");
}

TEST(MountPlan, PeersOfALocalSourceAndAnUnknownPolicyAreRefusedBeforeTheListing) {
  auto plan = PlanMount(Parse({"--peers", "http://10.0.0.1:8080", "/data/set", "/mnt"}));
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message,
            "cannot use peers for /data/set: peers cache s3:// and http(s):// sources, and this "
            "is a local one");
  MountArgs args = Parse({"/data/set", "/mnt"});
  args.policy = "fifo";  // past the parser, which knows the same table
  plan = PlanMount(args);
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message, "unknown --policy fifo: use consume-once, pin or lru");
  args.cache_bytes = 0;  // no cache, no policy
  EXPECT_TRUE(PlanMount(args));
  EXPECT_EQ(ErrorOf(CheckTierOptions(Parse({"--cache-size", "0", "--disk-cache", "/d", "a", "b"}))),
            "cannot use a disk cache with --cache-size 0: it lies under the pinned one");
}

TEST(MountPlan, AStoresDatasetHasAStorePlanAndNoEngine) {
  auto plan = PlanMount(Parse({"s3://bucket/set", "/mnt"}));
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_TRUE(plan->store);
  EXPECT_EQ(plan->store->url, "s3://bucket/set/");
  EXPECT_EQ(plan->engine, EngineChoice::kStore);
  plan = PlanMount(Parse({"/data/set", "/mnt"}));
  ASSERT_TRUE(plan);
  EXPECT_FALSE(plan->store);
}

TEST(EnginePlan, IoUringReadsIntoTheArenaOnly) {
  EXPECT_EQ(PlanEngine(Parse({"/d", "/m"}), false), EngineChoice::kUring);
  EXPECT_EQ(PlanEngine(Parse({"--io-engine", "pread", "/d", "/m"}), false), EngineChoice::kPread);
  EXPECT_EQ(PlanEngine(Parse({"--cache-size", "0", "/d", "/m"}), false), EngineChoice::kPread);
  EXPECT_EQ(PlanEngine(Parse({"/d", "/m"}), true), EngineChoice::kStore);
}

// A store's dataset on a machine whose cache folder is on a local disk of 400 GiB.
TierFacts LocalDisk() {
  TierFacts facts;
  facts.root_fs_bytes = 400ull << 30;
  return facts;
}

TEST(TierPlan, AStoresDatasetGetsOneBoundByAQuarterOfItsDisk) {
  const MountArgs args = Parse({"http://h/pack/", "/mnt"});
  auto plan = PlanTier(args, true, "http://h/pack/", LocalDisk());
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_TRUE(plan->options);
  EXPECT_EQ(plan->options->root, DefaultCacheDir() / "tier");
  EXPECT_EQ(plan->options->dataset, TierDatasetFolder("http://h/pack/"));
  EXPECT_EQ(plan->options->max_bytes, 100ull << 30);
  EXPECT_TRUE(plan->options->evict);
  EXPECT_TRUE(plan->sized_by_default);
  EXPECT_FALSE(plan->asked);
  EXPECT_TRUE(plan->slow_source.empty());
  EXPECT_TRUE(plan->why_none.empty());
}

TEST(TierPlan, WhatWasAskedForIsKept) {
  const MountArgs args = Parse({"--disk-cache", "/nvme/tier", "--disk-cache-size", "20GiB",
                                "--policy", "pin", "/data/set", "/mnt"});
  auto plan = PlanTier(args, false, "/data/set", LocalDisk());
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_TRUE(plan->options);
  EXPECT_EQ(plan->options->root, "/nvme/tier");
  EXPECT_EQ(plan->options->max_bytes, 20ull << 30);
  EXPECT_FALSE(plan->options->evict);  // pin: fill, then keep
  EXPECT_TRUE(plan->asked);
  EXPECT_FALSE(plan->sized_by_default);
}

TEST(TierPlan, ALocalDatasetGetsOneOnlyOnANetworkFilesystem) {
  const MountArgs args = Parse({"/data/set", "/mnt"});
  auto plan = PlanTier(args, false, "/data/set", LocalDisk());
  ASSERT_TRUE(plan);
  EXPECT_FALSE(plan->options);
  TierFacts nfs = LocalDisk();
  nfs.slow_source = "NFS";
  plan = PlanTier(args, false, "/data/set", nfs);
  ASSERT_TRUE(plan);
  ASSERT_TRUE(plan->options);
  EXPECT_EQ(plan->slow_source, "NFS");  // said with the bound: why there is a tier
  // Asked for, the tier needs no reason.
  plan = PlanTier(Parse({"--disk-cache", "/nvme", "/data/set", "/mnt"}), false, "/data/set", nfs);
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->options);
  EXPECT_TRUE(plan->slow_source.empty());
}

TEST(TierPlan, NoneWhereRefusedOrWithoutACache) {
  EXPECT_FALSE(
      PlanTier(Parse({"--no-disk-cache", "s3://b/s", "/m"}), true, "s3://b/s/", LocalDisk())
          ->options);
  EXPECT_FALSE(
      PlanTier(Parse({"--cache-size", "0", "s3://b/s", "/m"}), true, "s3://b/s/", LocalDisk())
          ->options);
  auto plan = PlanTier(Parse({"--cache-size", "0", "--disk-cache-size", "1GiB", "s3://b/s", "/m"}),
                       true, "s3://b/s/", LocalDisk());
  ASSERT_FALSE(plan);
  EXPECT_EQ(plan.error().message,
            "cannot use a disk cache with --cache-size 0: it lies under the pinned one");
}

TEST(TierPlan, TheDefaultFolderOnANetworkFilesystemIsLeftOffSayingWhy) {
  TierFacts facts = LocalDisk();
  facts.root_network = "NFS";
  auto plan = PlanTier(Parse({"s3://b/s", "/m"}), true, "s3://b/s/", facts);
  ASSERT_TRUE(plan);
  EXPECT_FALSE(plan->options);
  EXPECT_EQ(plan->why_none,
            "no disk cache: the default folder " + (DefaultCacheDir() / "tier").string() +
                " is on NFS, a network filesystem, where a cache is slow and fills a quota; give "
                "--disk-cache DIR on a local disk to keep one");
  // A folder given is the user's choice.
  plan = PlanTier(Parse({"--disk-cache", "/home/me/tier", "s3://b/s", "/m"}), true, "s3://b/s/",
                  facts);
  ASSERT_TRUE(plan);
  EXPECT_TRUE(plan->options);
  EXPECT_TRUE(plan->why_none.empty());
}

TEST(TierPlan, ObservingOpensAndCreatesNothing) {
  TempDir dir;
  const auto root = dir.path() / "not" / "yet";
  const TierFacts facts =
      ObserveTier(Parse({"--disk-cache", root.string(), "/d", "/m"}), false, dir.path());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "not"));
  EXPECT_GT(facts.root_fs_bytes, 0u);  // that of its nearest existing parent
}

TEST(PolicyPlan, NamesComeFromTheTable) {
  for (std::string_view name : policy_name::kAll) {
    MountArgs args;
    args.policy = name;
    EXPECT_TRUE(CheckPolicy(args)) << name;
  }
  MountArgs args;
  args.policy = "mru";
  EXPECT_EQ(ErrorOf(CheckPolicy(args)), "unknown --policy mru: use consume-once, pin or lru");
}

TEST(CachePlan, OptionsFromTheMountAndTheSource) {
  const MountArgs args = Parse({"--prefetch-depth", "4", "--verify", "--miss-reads", "members",
                                "--policy", "lru", "/d", "/m"});
  CacheInputs inputs{8 << 20, 1 << 20, 16, 1ull << 30, true, nullptr};
  CacheOptions options = PlanCacheOptions(args, inputs);
  EXPECT_EQ(options.policy, "lru");
  EXPECT_EQ(options.prefetch_depth, 4u);
  EXPECT_EQ(options.io_piece, size_t{8} << 20);
  EXPECT_EQ(options.demand_block, size_t{1} << 20);
  EXPECT_EQ(options.reads_in_flight, 16u);
  EXPECT_TRUE(options.verify);
  EXPECT_EQ(options.miss_reads, "members");
  EXPECT_EQ(options.page_cache_bytes, 1ull << 30);
  EXPECT_TRUE(options.whole_groups);
  // Reads in flight given win over the source's; members read alone prefetch nothing.
  inputs.whole_groups = false;
  options = PlanCacheOptions(Parse({"--reads-in-flight", "3", "/d", "/m"}), inputs);
  EXPECT_EQ(options.reads_in_flight, 3u);
  EXPECT_EQ(options.prefetch_depth, 0u);
  EXPECT_FALSE(options.whole_groups);
  EXPECT_EQ(PlanCacheOptions(Parse({"--no-prefetch", "/d", "/m"}), CacheInputs{}).prefetch_depth,
            0u);
}

TEST(CachePlan, ShardedNodesReadWholeGroupsOnlyWhenTheyKeepTheDataset) {
  EXPECT_TRUE(WholeGroupsPay(Parse({"/d", "/m"}), 1, 100));
  const MountArgs sharded = Parse({"--world-size", "4", "/d", "/m"});
  EXPECT_TRUE(WholeGroupsPay(sharded, 100, 100));
  EXPECT_FALSE(WholeGroupsPay(sharded, 99, 100));
}

}  // namespace
}  // namespace gpufs
