// What gpufs-stat -w shows: a mount that reads through peer caches, its hit ratio, the
// kernel's page cache, and the same figures as key=value and JSON.
#include "cli/stat/stat_watch.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace gpufs {
namespace {

nlohmann::json StatsWithPeers(uint64_t peer_bytes, uint64_t store_bytes) {
  return {{"pid", 1},
          {"files", 10},
          {"served", {{"files", 0}, {"bytes", 0}}},
          {"io",
           {{"kind", "s3"},
            {"requests", 3},
            {"bytes", store_bytes},
            {"peer_bytes", peer_bytes},
            {"peer_failures", 4},
            {"peer_fallbacks", 2},
            {"peer_mismatches", 1},
            {"peers",
             {{{"url", "http://a:3128"}, {"up", true}, {"bytes", peer_bytes}},
              {{"url", "http://b:3128"}, {"up", false}, {"bytes", 0}}}}}}};
}

TEST(StatWatchTest, ShowsWhereTheBytesComeFromAndWhichPeersAreSkipped) {
  const auto before = StatsWithPeers(0, 0);
  const auto after = StatsWithPeers(20'000'000, 5'000'000);
  const std::string frame = WatchFrame("/mnt", before, after, 2.0);
  EXPECT_NE(
      frame.find("peers     1 of 2 up   peers 10.0 MB/s  store 2.5 MB/s  failed 4  fallback 2\n"),
      std::string::npos)
      << frame;
  EXPECT_NE(frame.find("skipped: http://b:3128"), std::string::npos) << frame;
  EXPECT_EQ(frame.find("skipped: http://a:3128"), std::string::npos) << frame;
  const std::string line = WatchLine(before, after, 2.0);
  EXPECT_NE(line.find(" peers=2 peers_up=1 peer_mb_per_s=10.0 store_mb_per_s=2.5 peer_failures=4 "
                      "peer_fallbacks=2 peer_mismatches=1"),
            std::string::npos)
      << line;
}

TEST(StatWatchTest, ACompressedArchiveShowsItsDecodingRateCoresAndErrors) {
  nlohmann::json before = StatsWithPeers(0, 0), after = StatsWithPeers(0, 0);
  before["io"].erase("peers");
  after["io"].erase("peers");
  before["io"].update({{"decoded_groups", 10},
                       {"decoded_bytes", 100'000'000},
                       {"decode_errors", 0},
                       {"decode_seconds", 1.0}});
  after["io"].update({{"decoded_groups", 14},
                      {"decoded_bytes", 160'000'000},
                      {"decode_errors", 1},
                      {"decode_seconds", 4.0}});
  const std::string frame = WatchFrame("/mnt", before, after, 2.0);
  EXPECT_NE(frame.find("decoded                          30.0 MB/s   1.50 cores  groups 14  "
                       "errors 1\n"),
            std::string::npos)
      << frame;
  const std::string line = WatchLine(before, after, 2.0);
  EXPECT_NE(line.find(" decoded_mb_per_s=30.0 decode_cores=1.50 decoded_groups=14 decode_errors=1"),
            std::string::npos)
      << line;
  // A mount of anything else has neither.
  EXPECT_EQ(WatchFrame("/mnt", StatsWithPeers(0, 0), StatsWithPeers(0, 0), 2.0).find("decoded"),
            std::string::npos);
  EXPECT_EQ(WatchLine(StatsWithPeers(0, 0), StatsWithPeers(0, 0), 2.0).find("decode"),
            std::string::npos);
}

TEST(StatWatchTest, ShowsWhereTheStoresKeysComeFromAndTheirRefreshes) {
  nlohmann::json stats = StatsWithPeers(0, 0);
  stats["io"]["credentials"] = {{"source", "instance metadata (IMDSv2, role r) at http://x"},
                                {"expires_in_s", 1200},
                                {"refreshes", 3},
                                {"refresh_failures", 1}};
  const std::string frame = WatchFrame("/mnt", stats, stats, 1.0);
  EXPECT_NE(frame.find("keys      expire in 1200 s  refreshed 3  failed 1  instance metadata"),
            std::string::npos)
      << frame;
  const std::string line = WatchLine(stats, stats, 1.0);
  EXPECT_NE(line.find(" credentials_source=\"instance metadata (IMDSv2, role r) at http://x\" "
                      "credentials_expires_in_s=1200 credentials_refreshes=3 "
                      "credentials_refresh_failures=1"),
            std::string::npos)
      << line;
}

// A stats reply of a mount with a cache, whose epoch in progress served `hit` and `miss`
// bytes (nothing served: no hit ratio).
nlohmann::json StatsWithEpoch(uint64_t reads, uint64_t hit, uint64_t miss) {
  nlohmann::json current = {{"stall_fraction", 0.5},
                            {"demand_mb_per_s", 10.0},
                            {"bytes_served", hit + miss},
                            {"hit_bytes", hit},
                            {"miss_bytes", miss},
                            {"hit_ratio", nullptr},
                            {"from", nlohmann::json::object()}};
  if (hit + miss > 0) current["hit_ratio"] = static_cast<double>(hit) / (hit + miss);
  return {{"pid", 1},
          {"files", 500},
          {"served", {{"reads", reads}, {"files", reads}, {"bytes", 0}}},
          {"io", {{"kind", "local"}, {"requests", 0}}},
          {"cache",
           {{"policy", "consume-once"},
            {"epoch", 2},
            {"epoch_files_served", 0},
            {"budget_bytes", 1 << 20},
            {"stall", {{"epoch", 2}, {"current", current}, {"last", nullptr}}}}}};
}

std::map<std::string, std::string> Kv(const std::string& line) {
  std::map<std::string, std::string> kv;
  std::istringstream fields(line);
  for (std::string item; fields >> item;) {
    const size_t eq = item.find('=');
    kv[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return kv;
}

TEST(StatWatchTest, AHitRatioNotMeasuredIsADashAndOneMeasuredLiesInZeroToOne) {
  const nlohmann::json idle = StatsWithEpoch(0, 0, 0);
  EXPECT_EQ(Kv(WatchLine(idle, idle, 1.0))["hit_ratio"], "-");
  EXPECT_TRUE(nlohmann::json::parse(WatchJson(idle, idle, 1.0))["hit_ratio"].is_null());
  EXPECT_NE(WatchFrame("/mnt", idle, idle, 1.0).find("hit ratio    -   this epoch"),
            std::string::npos)
      << WatchFrame("/mnt", idle, idle, 1.0);
  const nlohmann::json cold = StatsWithEpoch(10, 0, 40960);  // every byte from the source
  EXPECT_EQ(Kv(WatchLine(idle, cold, 1.0))["hit_ratio"], "0.0000");
  const nlohmann::json warm = StatsWithEpoch(20, 30720, 10240);
  EXPECT_EQ(Kv(WatchLine(cold, warm, 1.0))["hit_ratio"], "0.7500");
  EXPECT_NE(WatchFrame("/mnt", cold, warm, 1.0).find("hit ratio  75.0% this epoch"),
            std::string::npos);
}

// An epoch the kernel's page cache serves never reaches gpufsd: with no read in the
// interval and the page cache holding the files, the view says who is serving.
TEST(StatWatchTest, AnIntervalWithNoReadAndTheFilesInThePageCacheSaysTheKernelServes) {
  const nlohmann::json idle = StatsWithEpoch(500, 0, 0);
  const KernelView kernel{1.0};
  const std::string frame = WatchFrame("/mnt", idle, idle, 1.0, kernel);
  EXPECT_NE(frame.find("kernel    the kernel's page cache is serving (reads do not reach gpufsd)"),
            std::string::npos)
      << frame;
  EXPECT_NE(frame.find("it holds 100.0% of the dataset's pages"), std::string::npos) << frame;
  EXPECT_EQ(Kv(WatchLine(idle, idle, 1.0, kernel))["page_cache_ratio"], "1.000");
  // Not measured (reads reached gpufsd): no such line, and "-".
  EXPECT_EQ(WatchFrame("/mnt", idle, idle, 1.0).find("page cache is serving"), std::string::npos);
  EXPECT_EQ(Kv(WatchLine(idle, idle, 1.0))["page_cache_ratio"], "-");
}

// --json prints the key=value line's figures as one JSON object: the same keys in the same
// order, numbers rounded as the line prints them, and null for each "-".
TEST(StatWatchTest, TheJsonObjectCarriesTheLinesKeysAndValues) {
  nlohmann::json before = StatsWithPeers(0, 0), after = StatsWithPeers(20'000'000, 5'000'000);
  after["io"]["credentials"] = {{"source", "env"}, {"refreshes", 1}};
  const std::string line = WatchLine(before, after, 2.0, KernelView{0.25});
  const nlohmann::ordered_json j =
      nlohmann::ordered_json::parse(WatchJson(before, after, 2.0, KernelView{0.25}));
  std::vector<std::string> keys;
  for (const auto& [key, value] : Kv(line)) keys.push_back(key);
  std::vector<std::string> json_keys;
  for (const auto& item : j.items()) json_keys.push_back(item.key());
  std::sort(json_keys.begin(), json_keys.end());
  EXPECT_EQ(json_keys, keys);
  for (const auto& [key, value] : Kv(line)) {
    const nlohmann::ordered_json& v = j[key];
    if (value == "-") {
      EXPECT_TRUE(v.is_null()) << key;
    } else if (v.is_number()) {
      EXPECT_DOUBLE_EQ(v.get<double>(), std::stod(value)) << key;
    } else {
      EXPECT_EQ(v.get<std::string>(), value) << key;
    }
  }
  EXPECT_DOUBLE_EQ(j["peer_mb_per_s"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["page_cache_ratio"].get<double>(), 0.25);
  EXPECT_TRUE(j["in_memory_ratio"].is_null());
  EXPECT_TRUE(j["credentials_expires_in_s"].is_null());
}

}  // namespace
}  // namespace gpufs
