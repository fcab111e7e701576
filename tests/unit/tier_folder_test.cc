// The disk tier's folder, directly: what a count finds under root, the ledger file and its
// privacy, deleting a copy, and the ledger's bound and eviction order.
#include "cache/tier/tier_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

namespace fs = std::filesystem;
using std::chrono::hours;

const std::string kOurs = "ours-0123456789abcdef";
const std::string kTheirs = "theirs-fedcba9876543210";

mode_t ModeOf(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

timespec SecondsAgo(int seconds) {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  now.tv_sec -= seconds;
  return now;
}

std::vector<std::string> Names(const std::vector<TierCopy>& copies) {
  std::vector<std::string> names;
  for (const TierCopy& c : copies) names.push_back(c.dataset + "/" + c.name);
  return names;
}

class TierFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::permissions(root(), fs::perms(0700));
    root_fd_ = open(root().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(root_fd_, 0);
    fs::create_directory(root() / kOurs);
    dir_fd_ = open((root() / kOurs).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(dir_fd_, 0);
  }
  void TearDown() override {
    ledger_.reset();
    close(dir_fd_);
    close(root_fd_);
  }

  const fs::path& root() const { return dir_.path(); }

  // A file of `bytes` under root/`dataset`, last read (its mtime) `age` ago.
  fs::path Put(const std::string& dataset, const std::string& name, size_t bytes,
               std::chrono::seconds age) {
    fs::create_directories(root() / dataset);
    const fs::path path = root() / dataset / name;
    std::ofstream(path) << std::string(bytes, 'x');
    fs::last_write_time(path, fs::file_time_type::clock::now() - age);
    return path;
  }

  // A ledger over root and our dataset folder; what it evicts is kept in evicted_.
  TierLedger& Ledger(TierLedger::Bounds bounds) {
    std::string why;
    const int fd = OpenLedger(root_fd_, why);
    EXPECT_GE(fd, 0) << why;
    ledger_.reset();
    ledger_ = std::make_unique<TierLedger>(
        root_fd_, dir_fd_, fd, std::move(bounds),
        [this](const TierCopy& copy) { evicted_.push_back(copy.dataset + "/" + copy.name); });
    return *ledger_;
  }
  TierLedger::Bounds Bound(uint64_t max_bytes, bool evict = true) {
    return TierLedger::Bounds{max_bytes, 0, evict, kOurs, SecondsAgo(60)};
  }

  // The ledger file's count, as written.
  uint64_t LedgerFile() {
    uint64_t used = 0;
    std::ifstream in(root() / kTierLedger, std::ios::binary);
    in.read(reinterpret_cast<char*>(&used), sizeof(used));
    return in.gcount() == sizeof(used) ? used : ~uint64_t{0};
  }

  TempDir dir_;
  int root_fd_ = -1;
  int dir_fd_ = -1;
  std::unique_ptr<TierLedger> ledger_;
  std::vector<std::string> evicted_;
};

TEST(TierFolder, ReadBeforeOrdersBySecondsThenNanoseconds) {
  const TierCopy a{"d", "a", 0, {100, 999'999'999}};
  const TierCopy b{"d", "b", 0, {101, 0}};
  const TierCopy c{"d", "c", 0, {101, 5}};
  EXPECT_TRUE(ReadBefore(a, b));
  EXPECT_FALSE(ReadBefore(b, a));
  EXPECT_TRUE(ReadBefore(b, c));
  EXPECT_FALSE(ReadBefore(c, b));
  EXPECT_FALSE(ReadBefore(c, c));
}

TEST(TierFolder, OwnTempFilesAreNamedByThisProcess) {
  EXPECT_EQ(OwnTempPrefix(), std::string(kTierTempPrefix) + std::to_string(getpid()) + "-");
}

TEST_F(TierFolderTest, ACountFindsTheCopiesOfEveryDatasetFolderAndTheirBytes) {
  Put(kOurs, "g000000-0000000000000000.grp", 1000, hours(3));
  Put(kOurs, "g000001-0000000000000000.grp", 2000, hours(1));
  Put(kTheirs, "g000000-1111111111111111.grp", 3000, hours(2));
  Put(kOurs, "notes.txt", 500, hours(0));  // counted, not a copy
  std::vector<TierCopy> copies;
  EXPECT_EQ(ScanRoot(root_fd_, &copies), 6500u);
  std::sort(copies.begin(), copies.end(), ReadBefore);
  EXPECT_EQ(Names(copies), (std::vector<std::string>{kOurs + "/g000000-0000000000000000.grp",
                                                     kTheirs + "/g000000-1111111111111111.grp",
                                                     kOurs + "/g000001-0000000000000000.grp"}));
  EXPECT_EQ(copies[1].bytes, 3000u);
  EXPECT_EQ(ScanRoot(root_fd_, nullptr), 6500u);
}

TEST_F(TierFolderTest, FoldersNotNamedAsTheTierNamesThemAreLeftAlone) {
  Put("photos", "keep.grp", 4000, hours(5));
  Put("almost-0123456789abcdeg", "keep.grp", 4000, hours(5));  // 'g' is no hex digit
  Put("short-01234567", "keep.grp", 4000, hours(5));
  Put(kOurs, "g000000-0000000000000000.grp", 1000, hours(1));
  std::vector<TierCopy> copies;
  EXPECT_EQ(ScanRoot(root_fd_, &copies), 1000u);
  EXPECT_EQ(copies.size(), 1u);
}

TEST_F(TierFolderTest, ACountNeverFollowsALinkedDatasetFolder) {
  TempDir outside;
  std::ofstream(outside.path() / "g000000-0000000000000000.grp") << std::string(4000, 'o');
  fs::create_directory_symlink(outside.path(), root() / "linked-0123456789abcdef");
  Put(kOurs, "g000000-0000000000000000.grp", 1000, hours(1));
  std::vector<TierCopy> copies;
  EXPECT_EQ(ScanRoot(root_fd_, &copies), 1000u);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].dataset, kOurs);
}

TEST_F(TierFolderTest, StaleTempFilesAreDeletedAndThisDaemonsOwnAreNotCounted) {
  const fs::path stale = Put(kOurs, ".tmp-1-0", 1000, hours(2));
  const fs::path writing = Put(kTheirs, ".tmp-1-1", 2000, hours(0));  // another's, live
  const fs::path own = Put(kOurs, OwnTempPrefix() + "7", 4000, hours(0));
  EXPECT_EQ(ScanRoot(root_fd_, nullptr), 2000u);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(writing));
  EXPECT_TRUE(fs::exists(own));
}

TEST_F(TierFolderTest, TheLedgerIsCreated0600AndExclusively) {
  std::string why;
  const int fd = OpenLedger(root_fd_, why);
  ASSERT_GE(fd, 0) << why;
  EXPECT_EQ(ModeOf(root() / kTierLedger), 0600);
  const uint64_t count = 12345;
  ASSERT_EQ(pwrite(fd, &count, sizeof(count), 0), static_cast<ssize_t>(sizeof(count)));
  close(fd);
  // Opened again, it is the same file, not a new one.
  const int again = OpenLedger(root_fd_, why);
  ASSERT_GE(again, 0) << why;
  uint64_t read = 0;
  EXPECT_EQ(pread(again, &read, sizeof(read), 0), static_cast<ssize_t>(sizeof(read)));
  EXPECT_EQ(read, count);
  close(again);
}

TEST_F(TierFolderTest, ALedgerOthersCouldReadIsTightened) {
  std::ofstream(root() / kTierLedger) << "";
  fs::permissions(root() / kTierLedger, fs::perms(0644));
  std::string why;
  const int fd = OpenLedger(root_fd_, why);
  ASSERT_GE(fd, 0) << why;
  EXPECT_EQ(ModeOf(root() / kTierLedger), 0600);
  close(fd);
}

TEST_F(TierFolderTest, ALinkOrAnotherKindOfFileAtTheLedgerIsRefused) {
  TempDir outside;
  const fs::path secret = outside.path() / "secret";
  std::ofstream(secret) << "12345678";
  fs::permissions(secret, fs::perms(0644));
  fs::create_symlink(secret, root() / kTierLedger);
  std::string why;
  EXPECT_EQ(OpenLedger(root_fd_, why), -1);
  EXPECT_EQ(why, "it is a symbolic link");
  EXPECT_EQ(ModeOf(secret), 0644);  // never reached
  fs::remove(root() / kTierLedger);
  ASSERT_EQ(mkfifo((root() / kTierLedger).c_str(), 0600), 0);
  why.clear();
  EXPECT_EQ(OpenLedger(root_fd_, why), -1);
  EXPECT_EQ(why, "not a regular file");
}

TEST_F(TierFolderTest, RemoveCopyDeletesOnlyBeneathRootWithoutFollowingLinks) {
  const fs::path copy = Put(kOurs, "g000000-0000000000000000.grp", 1000, hours(1));
  EXPECT_TRUE(RemoveCopy(root_fd_, TierCopy{kOurs, copy.filename().string(), 1000, {}}));
  EXPECT_FALSE(fs::exists(copy));
  EXPECT_FALSE(RemoveCopy(root_fd_, TierCopy{kOurs, copy.filename().string(), 1000, {}}));  // gone
  TempDir outside;
  const fs::path kept = outside.path() / "g000000-0000000000000000.grp";
  std::ofstream(kept) << "k";
  fs::create_directory_symlink(outside.path(), root() / "linked-0123456789abcdef");
  EXPECT_FALSE(
      RemoveCopy(root_fd_, TierCopy{"linked-0123456789abcdef", kept.filename().string(), 1, {}}));
  EXPECT_TRUE(fs::exists(kept));
}

TEST_F(TierFolderTest, TheCountIsReadBackAfterTheLedgerIsOpenedAgain) {
  Put(kOurs, "g000000-0000000000000000.grp", 1000, hours(1));
  TierLedger& first = Ledger(Bound(1 << 20));
  ASSERT_TRUE(first.Reserve(3000));  // an empty ledger: the folder is counted first
  EXPECT_EQ(first.Used(), 4000u);
  first.Change([](uint64_t& used) { used -= 500; });
  EXPECT_EQ(first.Used(), 3500u);
  EXPECT_EQ(LedgerFile(), 3500u);
  TierLedger& second = Ledger(Bound(1 << 20));  // the first is closed
  EXPECT_EQ(second.Used(), 3500u);
}

TEST_F(TierFolderTest, DaemonsSharingTheFolderShareTheCount) {
  TierLedger& one = Ledger(Bound(1 << 20));
  std::string why;
  TierLedger two(root_fd_, dir_fd_, OpenLedger(root_fd_, why), Bound(1 << 20),
                 [](const TierCopy&) {});
  ASSERT_TRUE(one.Reserve(1000));
  ASSERT_TRUE(two.Reserve(2000));
  EXPECT_EQ(one.Used(), 3000u);
  EXPECT_EQ(two.Used(), 3000u);
}

TEST_F(TierFolderTest, AChangeToALedgerThatCannotBeReadIsNotWritten) {
  TierLedger& ledger = Ledger(Bound(1 << 20));  // created empty: nothing to read
  ledger.Change([](uint64_t& used) { used += 700; });
  EXPECT_EQ(ledger.Used(), 0u);
  EXPECT_EQ(fs::file_size(root() / kTierLedger), 0u);
}

TEST_F(TierFolderTest, FitsKeepsTheBoundAndTheReserve) {
  TierLedger& bounded = Ledger(Bound(10'000));
  EXPECT_TRUE(bounded.Fits(5000, 5000));
  EXPECT_FALSE(bounded.Fits(5000, 5001));
  EXPECT_FALSE(bounded.Fits(5000, 4000, 1001));
  EXPECT_EQ(bounded.Room(), 10'000u);
  ASSERT_TRUE(bounded.Reserve(1234));
  // A reserve larger than any disk: nothing fits, and the room is what is used.
  TierLedger& reserved = Ledger(TierLedger::Bounds{0, uint64_t{1} << 62, true, kOurs, {}});
  EXPECT_FALSE(reserved.Fits(0, 1));
  EXPECT_EQ(reserved.keep_free(), uint64_t{1} << 62);
  EXPECT_EQ(reserved.Used(), 1234u);
  EXPECT_EQ(reserved.OnDisk(), 1234u);
  EXPECT_EQ(reserved.Room(), 1234u);
}

// The least recently read go first, of every dataset, until the write fits with room to
// spare (here a quarter of what is used), and no further.
TEST_F(TierFolderTest, EvictionDeletesTheLeastRecentlyReadUntilTheWriteFits) {
  Put(kOurs, "g000002-0000000000000000.grp", 2000, hours(2));
  Put(kTheirs, "g000000-0000000000000000.grp", 2000, hours(4));
  Put(kOurs, "g000001-0000000000000000.grp", 2000, hours(1) + std::chrono::minutes(30));
  Put(kTheirs, "g000003-0000000000000000.grp", 2000, hours(3));
  TierLedger& ledger = Ledger(Bound(10'000));
  ASSERT_TRUE(ledger.Reserve(3000));
  // 8000 used: 13,000 with the write and 2000 spare; 2 copies deleted leave 9000.
  EXPECT_EQ(evicted_, (std::vector<std::string>{kTheirs + "/g000000-0000000000000000.grp",
                                                kTheirs + "/g000003-0000000000000000.grp"}));
  EXPECT_FALSE(fs::exists(root() / kTheirs / "g000000-0000000000000000.grp"));
  EXPECT_TRUE(fs::exists(root() / kOurs / "g000002-0000000000000000.grp"));
  EXPECT_EQ(ledger.Used(), 7000u);  // 4000 kept and 3000 reserved
  EXPECT_FALSE(ledger.Full());
}

TEST_F(TierFolderTest, ThisDatasetsCopiesReadSinceItOpenedAreNotEvicted) {
  Put(kOurs, "g000000-0000000000000000.grp", 4000, std::chrono::seconds(5));
  Put(kOurs, "g000001-0000000000000000.grp", 4000, std::chrono::seconds(5));
  Put(kTheirs, "g000000-0000000000000000.grp", 1000, std::chrono::seconds(5));
  TierLedger& ledger = Ledger(Bound(10'000));  // opened a minute ago
  EXPECT_FALSE(ledger.Reserve(4000));
  // Another dataset's copy goes, even though read as recently; ours stay.
  EXPECT_EQ(evicted_, (std::vector<std::string>{kTheirs + "/g000000-0000000000000000.grp"}));
  EXPECT_TRUE(fs::exists(root() / kOurs / "g000000-0000000000000000.grp"));
  EXPECT_TRUE(fs::exists(root() / kOurs / "g000001-0000000000000000.grp"));
  EXPECT_TRUE(ledger.Full());
  EXPECT_EQ(ledger.Used(), 8000u);  // the count, with nothing reserved
}

TEST_F(TierFolderTest, WithoutEvictionAWriteThatDoesNotFitIsRefused) {
  Put(kTheirs, "g000000-0000000000000000.grp", 8000, hours(5));
  TierLedger& ledger = Ledger(Bound(10'000, false));
  EXPECT_TRUE(ledger.Reserve(2000));
  EXPECT_FALSE(ledger.Full());
  EXPECT_FALSE(ledger.Reserve(1));
  EXPECT_TRUE(ledger.Full());
  EXPECT_TRUE(evicted_.empty());
  EXPECT_TRUE(fs::exists(root() / kTheirs / "g000000-0000000000000000.grp"));
  ledger.Change([&](uint64_t& used) {
    ledger.Unpend(2000);
    used -= 2000;
  });
  EXPECT_EQ(ledger.Used(), 8000u);
  EXPECT_TRUE(ledger.Reserve(2000));  // given back, the room is there again
  EXPECT_FALSE(ledger.Full());
}

// A ledger left high by a writer that died is counted again from the folder before a
// write that does not fit evicts anything.
TEST_F(TierFolderTest, ALedgerLeftHighIsRecountedBeforeEvicting) {
  Put(kTheirs, "g000000-0000000000000000.grp", 1000, hours(5));
  TierLedger& ledger = Ledger(Bound(10'000));
  const uint64_t high = 9999;
  const int fd = open((root() / kTierLedger).c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(pwrite(fd, &high, sizeof(high), 0), static_cast<ssize_t>(sizeof(high)));
  close(fd);
  EXPECT_EQ(ledger.Used(), high);
  ASSERT_TRUE(ledger.Reserve(5000));
  EXPECT_TRUE(evicted_.empty());
  EXPECT_EQ(ledger.Used(), 6000u);
}

}  // namespace
}  // namespace gpufs
