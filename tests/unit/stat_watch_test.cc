// What gpufs-stat -w shows of a mount that reads through peer caches.
#include "cli/stat_watch.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace gpufs
