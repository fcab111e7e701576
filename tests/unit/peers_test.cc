// The peer list's parsing and its routing rules: rendezvous order, what a change of the
// list moves, and how a failed peer is skipped and tried again.
#include "source/remote/address/peers.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/unit/temp_dir.h"

namespace gpufs::remote {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> Urls(size_t n, size_t first = 0) {
  std::vector<std::string> urls;
  for (size_t i = first; i < first + n; ++i)
    urls.push_back(fmt::format("http://10.0.0.{}:3128", i));
  return urls;
}

std::string Key(int block) { return fmt::format("s3://b/pack/blob-0.gpufs\n\"e\"\n{}", block); }

// The first choice of each of `blocks` keys, by URL.
std::vector<std::string> Owners(const PeerSet& peers, int blocks) {
  std::vector<std::string> owners;
  for (int b = 0; b < blocks; ++b) owners.push_back(peers.url(peers.Order(Key(b)).front()));
  return owners;
}

TEST(PeerListTest, AcceptsUrlsAndRefusesWhatIsNotAProxyAddress) {
  auto ok = ParsePeerList(" http://a:3128/, https://b ,http://[::1]:80,");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(*ok, (std::vector<std::string>{"http://a:3128", "https://b", "http://[::1]:80"}));
  const std::map<std::string, std::string> bad = {{"ftp://a:1", "want http:// or https://"},
                                                  {"a:3128", "want http://"},
                                                  {"http://a:1/cache", "no path"},
                                                  {"http://u:p@a:1", "no user"},
                                                  {"http://a:1,http://a:1/", "listed twice"},
                                                  {"http://a:99999x", "port"},
                                                  {" , ", "names no peer"},
                                                  {"http://", "no host"}};
  for (const auto& [list, why] : bad) {
    auto r = ParsePeerList(list);
    ASSERT_FALSE(r.ok()) << list;
    EXPECT_NE(r.error().message.find(why), std::string::npos) << list << ": " << r.error().message;
  }
}

TEST(PeerListTest, ReadsAFileOfOneUrlPerLine) {
  TempDir dir;
  const auto path = dir.path() / "peers";
  std::ofstream(path) << "# job 42\nhttp://a:3128\n\n  http://b:3128  # node b\n";
  auto urls = ReadPeerFile(path);
  ASSERT_TRUE(urls.ok()) << urls.error().message;
  EXPECT_EQ(*urls, (std::vector<std::string>{"http://a:3128", "http://b:3128"}));
  std::ofstream(path) << "http://a:3128,http://b:3128\n";
  auto two = ReadPeerFile(path);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().message.find("one URL per line"), std::string::npos);
  EXPECT_NE(two.error().message.find(path.string()), std::string::npos);
  auto missing = ReadPeerFile(dir.path() / "absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("absent"), std::string::npos);
}

TEST(RendezvousTest, EveryNodeRanksAlikeAndBlocksSpreadEvenly) {
  PeerSet a(PeerConfig{Urls(4)});
  PeerSet b(PeerConfig{Urls(4)});
  std::map<std::string, int> per_peer;
  for (int block = 0; block < 4000; ++block) {
    const auto order = a.Order(Key(block));
    EXPECT_EQ(order, b.Order(Key(block)));
    ASSERT_EQ(order.size(), 4u);
    ++per_peer[a.url(order.front())];
  }
  ASSERT_EQ(per_peer.size(), 4u);
  for (const auto& [url, n] : per_peer) {
    EXPECT_GT(n, 850) << url;  // 1000 expected; far outside chance when the hash is broken
    EXPECT_LT(n, 1150) << url;
  }
}

TEST(RendezvousTest, AChangedListMovesOnlyTheBlocksOfThePeerThatCameOrWent) {
  const int blocks = 2000;
  const auto before = Owners(PeerSet(PeerConfig{Urls(4)}), blocks);
  // Peer 2 leaves: only its blocks move.
  std::vector<std::string> three = Urls(4);
  three.erase(three.begin() + 2);
  const auto after_leave = Owners(PeerSet(PeerConfig{three}), blocks);
  // Peer 9 joins: blocks move only to it.
  std::vector<std::string> five = Urls(4);
  five.push_back("http://10.0.0.9:3128");
  const auto after_join = Owners(PeerSet(PeerConfig{five}), blocks);
  int moved_leave = 0;
  int moved_join = 0;
  for (int b = 0; b < blocks; ++b) {
    if (before[b] != after_leave[b]) {
      ++moved_leave;
      EXPECT_EQ(before[b], Urls(4)[2]) << b;
    }
    if (before[b] != after_join[b]) {
      ++moved_join;
      EXPECT_EQ(after_join[b], "http://10.0.0.9:3128") << b;
    }
  }
  EXPECT_GT(moved_leave, blocks / 6);  // about a quarter
  EXPECT_GT(moved_join, blocks / 8);   // about a fifth
}

TEST(PeerHealthTest, AFailedPeerIsSkippedThenTriedOnceMoreAfterRetryAfter) {
  PeerSet peers(PeerConfig{Urls(2), 4 << 20, 5000ms});
  const auto t0 = PeerSet::Clock::now();
  EXPECT_TRUE(peers.MayAsk(0, t0));
  peers.Failed(0, "connection refused", t0);
  EXPECT_FALSE(peers.MayAsk(0, t0 + 1s));
  EXPECT_TRUE(peers.MayAsk(1, t0 + 1s));
  // After retry_after one request may try it; others wait for that one.
  EXPECT_TRUE(peers.MayAsk(0, t0 + 6s));
  EXPECT_FALSE(peers.MayAsk(0, t0 + 6s));
  peers.Failed(0, "connection refused", t0 + 6s);
  EXPECT_FALSE(peers.MayAsk(0, t0 + 7s));
  EXPECT_TRUE(peers.MayAsk(0, t0 + 12s));
  peers.Answered(0, 100);
  EXPECT_TRUE(peers.MayAsk(0, t0 + 12s));
  EXPECT_TRUE(peers.MayAsk(0, t0 + 12s));
  const auto stats = peers.Stats();
  EXPECT_EQ(stats[0]["url"], Urls(2)[0]);
  EXPECT_EQ(stats[0]["up"], true);
  EXPECT_EQ(stats[0]["failures"], 2);
  EXPECT_EQ(stats[0]["requests"], 3);
  EXPECT_EQ(stats[0]["bytes"], 100);
}

TEST(PeerSecretTest, ReadsOneWordFromAPrivateFile) {
  TempDir dir;
  const auto path = dir.path() / "secret";
  std::ofstream(path) << "0123456789abcdef0123456789abcdef\n";
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  auto secret = ReadPeerSecret(path);
  ASSERT_TRUE(secret.ok()) << secret.error().message;
  EXPECT_EQ(*secret, "0123456789abcdef0123456789abcdef");
}

TEST(PeerSecretTest, RefusesAFileOthersMayReadOrABadWordWithoutShowingIt) {
  TempDir dir;
  const auto path = dir.path() / "secret";
  const std::string word = "0123456789abcdef0123456789abcdef";
  std::ofstream(path) << word;
  std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                         std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
  auto open = ReadPeerSecret(path);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.error().message.find("chmod 600"), std::string::npos) << open.error().message;
  EXPECT_EQ(open.error().message.find(word), std::string::npos);
  for (const std::string& bad :
       std::vector<std::string>{"", "short", "has space in it 0123456789", "semi;colon0123456789",
                                "0123456789abcdef\n\n", std::string(513, 'a')}) {
    std::ofstream(path, std::ios::trunc) << bad;
    std::filesystem::permissions(path, std::filesystem::perms::owner_read);
    auto refused = ReadPeerSecret(path);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find("want one word"), std::string::npos)
        << refused.error().message;
    if (!bad.empty()) {
      EXPECT_EQ(refused.error().message.find(bad), std::string::npos);
    }
  }
  EXPECT_FALSE(ReadPeerSecret(dir.path() / "absent").ok());
  EXPECT_FALSE(ReadPeerSecret(dir.path()).ok());
}

// A secret file another user owns is theirs to read or replace: refused, as root's own is
// not.
TEST(PeerSecretTest, RefusesAFileAnotherUserOwns) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the file to another uid";
  TempDir dir;
  const auto path = dir.path() / "secret";
  std::ofstream(path) << "0123456789abcdef0123456789abcdef";
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  ASSERT_TRUE(ReadPeerSecret(path).ok());
  ASSERT_EQ(chown(path.c_str(), 65534, 65534), 0);
  auto refused = ReadPeerSecret(path);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("owned by uid 65534"), std::string::npos)
      << refused.error().message;
}

// A fifo at the secret's path is refused at once: opening it must not wait for a writer,
// which would hold the mount for ever.
TEST(PeerSecretTest, RefusesAFifoWithoutWaitingForAWriter) {
  TempDir dir;
  const auto path = dir.path() / "secret";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  std::atomic<bool> done{false};
  std::atomic<bool> had_to_unblock{false};
  // Should the open wait for a writer, this one comes after a while and lets it go on.
  std::thread writer([&] {
    std::this_thread::sleep_for(500ms);
    while (!done) {
      const int fd = open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) {
        had_to_unblock = true;
        close(fd);
        return;
      }
      std::this_thread::sleep_for(10ms);
    }
  });
  auto secret = ReadPeerSecret(path);
  done = true;
  writer.join();
  EXPECT_FALSE(had_to_unblock) << "the open waited for a writer";
  ASSERT_FALSE(secret.ok());
  EXPECT_NE(secret.error().message.find(path.string()), std::string::npos)
      << secret.error().message;
}

}  // namespace
}  // namespace gpufs::remote
