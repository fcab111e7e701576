#include "base/private_files.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "base/file_io.h"
#include "dataset/format/mytar.h"
#include "dataset/format/native_index.h"
#include "dataset/open/open_dataset.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr uid_t kNobody = 65534;
const FolderRole kRole{"disk cache", "give each user a folder of their own (--disk-cache DIR)"};

mode_t ModeOf(const std::filesystem::path& path) {
  struct stat st {};
  EXPECT_EQ(lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::string BytesOf(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(PrivateFolder, CreatesEachMissingLevel0700) {
  TempDir dir;
  const auto folder = dir.path() / "cache" / "gpufs" / "tier";
  auto opened = OpenPrivateFolder(folder, kRole);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ(ModeOf(dir.path() / "cache"), 0700);
  EXPECT_EQ(ModeOf(dir.path() / "cache" / "gpufs"), 0700);
  EXPECT_EQ(ModeOf(folder), 0700);
  EXPECT_TRUE(opened->note.empty());
}

// A user who may write an earlier level of the path could point it elsewhere: at a folder
// of root's that root would then take over.
TEST(PrivateFolder, RefusesALevelAnotherUserMayWriteOrALinkTheyCouldHavePlanted) {
  TempDir dir;
  const auto open = dir.path() / "open";
  ASSERT_EQ(mkdir(open.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open.c_str(), 0777), 0);
  auto opened = OpenPrivateFolder(open / "cache" / "tier", kRole);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().message,
            "cannot use disk cache " + (open / "cache" / "tier").string() + ": " + open.string() +
                ": others may write it (mode 0777) and it is not sticky, so they could replace "
                "what lies beneath it; name a folder whose every level only you or root may "
                "write");
  EXPECT_FALSE(std::filesystem::exists(open / "cache"));  // nothing made beneath it
  // Sticky (as /tmp): others may add names there, not replace ours; a link there is refused.
  ASSERT_EQ(chmod(open.c_str(), 01777), 0);
  EXPECT_TRUE(OpenPrivateFolder(open / "mine" / "tier", kRole).ok());
  const auto target = dir.path() / "roots";
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  std::filesystem::create_directory_symlink(target, open / "planted");
  opened = OpenPrivateFolder(open / "planted" / "tier", kRole);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(opened.error().message,
              HasSubstr((open / "planted").string() + ": a symbolic link where others may write"));
  EXPECT_FALSE(std::filesystem::exists(target / "tier"));
  // A link in a folder only this user or root may write was put there by one of them.
  std::filesystem::create_directory_symlink("roots", dir.path() / "mine");
  opened = OpenPrivateFolder(dir.path() / "mine" / "tier", kRole);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ(ModeOf(target / "tier"), 0700);
  if (geteuid() != 0) GTEST_SKIP() << "giving a folder to another uid needs root";
  const auto theirs = dir.path() / "theirs";
  ASSERT_EQ(mkdir(theirs.c_str(), 0755), 0);
  ASSERT_EQ(chown(theirs.c_str(), kNobody, kNobody), 0);
  opened = OpenPrivateFolder(theirs / "tier", kRole);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(opened.error().message,
              HasSubstr(theirs.string() + ": it is owned by uid 65534, who could replace"));
}

TEST(PrivateFolder, RefusesAFolderOfAnotherUidNamingTheFix) {
  if (geteuid() != 0) GTEST_SKIP() << "giving a folder to another uid needs root";
  TempDir dir;
  const auto folder = dir.path() / "shared";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  ASSERT_EQ(chown(folder.c_str(), kNobody, kNobody), 0);
  auto opened = OpenPrivateFolder(folder, kRole);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().message,
            "cannot use disk cache " + folder.string() +
                ": owned by uid 65534, not you (uid 0); give each user a folder of their own "
                "(--disk-cache DIR)");
}

TEST(PrivateFolder, RefusesAFolderOthersMayWrite) {
  TempDir dir;
  const auto folder = dir.path() / "open";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  ASSERT_EQ(chmod(folder.c_str(), 0777), 0);
  auto opened = OpenPrivateFolder(folder, kRole);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().message, "cannot use disk cache " + folder.string() +
                                        ": writable by others (mode 0777); chmod 700 " +
                                        folder.string());
  EXPECT_EQ(ModeOf(folder), 0777);  // refused, not changed
}

TEST(PrivateFolder, TightensAFolderOfOursOthersMayOnlyRead) {
  TempDir dir;
  const auto folder = dir.path() / "old";
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  ASSERT_EQ(chmod(folder.c_str(), 0755), 0);
  auto opened = OpenPrivateFolder(folder, kRole);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ(ModeOf(folder), 0700);
  EXPECT_THAT(opened->note, HasSubstr("mode 0755"));
  EXPECT_THAT(opened->note, HasSubstr(folder.string()));
}

TEST(PrivateFolder, RefusesALinkAtItsLastStep) {
  TempDir dir;
  const auto target = dir.path() / "target";
  ASSERT_EQ(mkdir(target.c_str(), 0755), 0);
  const auto link = dir.path() / "link";
  std::filesystem::create_symlink(target, link);
  auto opened = OpenPrivateFolder(link, kRole);
  ASSERT_FALSE(opened.ok());
  EXPECT_THAT(opened.error().message, HasSubstr("it is a symbolic link"));
  EXPECT_EQ(ModeOf(target), 0755);  // never tightened through the link
}

TEST(PrivateFolder, RefusesALinkBeneathAFolder) {
  TempDir dir;
  auto root = OpenPrivateFolder(dir.path() / "root", kRole);
  ASSERT_TRUE(root.ok());
  std::filesystem::create_symlink(dir.path(), dir.path() / "root" / "dataset-0");
  auto sub =
      OpenPrivateFolderAt(root->fd.get(), "dataset-0", dir.path() / "root" / "dataset-0", kRole);
  ASSERT_FALSE(sub.ok());
  EXPECT_THAT(sub.error().message, HasSubstr("symbolic link"));
}

TEST(CreateNew, RefusesAnExistingFileOrLink) {
  TempDir dir;
  const int dir_fd = open(dir.path().c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(dir_fd, 0);
  WriteText(dir.path() / "there", "old");
  const auto secret = dir.path() / "secret";
  WriteText(secret, "secret");
  std::filesystem::create_symlink(secret, dir.path() / "link");
  std::filesystem::create_symlink(dir.path() / "nowhere", dir.path() / "dangling");
  for (const char* name : {"there", "link", "dangling"}) {
    auto created = CreateNew(dir_fd, name, 0600, dir.path() / name);
    ASSERT_FALSE(created.ok()) << name;
    EXPECT_EQ(created.error().code, EEXIST) << name;
  }
  EXPECT_EQ(BytesOf(secret), "secret");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "nowhere"));
  auto fresh = CreateNew(dir_fd, "fresh", 0600, dir.path() / "fresh");
  EXPECT_TRUE(fresh.ok());
  EXPECT_EQ(ModeOf(dir.path() / "fresh"), 0600);
  close(dir_fd);
}

TEST(WriteFileAtomically, ReplacesALinkAtTheNameWithoutFollowingIt) {
  TempDir dir;
  const auto secret = dir.path() / "secret";
  WriteText(secret, "root only");
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  const auto cache = dir.path() / "cache";
  ASSERT_TRUE(OpenPrivateFolder(cache, kRole).ok());
  const auto index = cache / "a.gpufs-index";
  std::filesystem::create_symlink(secret, index);
  // Old writers used "<name>.tmp-<pid>": links there must not be followed either.
  for (int pid = getpid() - 4; pid < getpid() + 4; ++pid) {
    std::filesystem::create_symlink(secret, cache / fmt::format("a.gpufs-index.tmp-{}", pid));
  }
  ASSERT_TRUE(WriteFileAtomically(index, "INDEX", FileAccess::Private()).ok());
  EXPECT_EQ(BytesOf(secret), "root only");
  EXPECT_EQ(ModeOf(secret), 0600);
  EXPECT_FALSE(std::filesystem::is_symlink(index));
  EXPECT_EQ(BytesOf(index), "INDEX");
  EXPECT_EQ(ModeOf(index), 0600);
}

TEST(WriteFileAtomically, PrivateRefusesAFolderOthersMayWrite) {
  TempDir dir;
  const auto open_folder = dir.path() / "open";
  ASSERT_EQ(mkdir(open_folder.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_folder.c_str(), 0777), 0);
  auto written = WriteFileAtomically(open_folder / "x", "bytes", FileAccess::Private());
  ASSERT_FALSE(written.ok());
  EXPECT_THAT(written.error().message, HasSubstr("writable by others (mode 0777)"));
  EXPECT_FALSE(std::filesystem::exists(open_folder / "x"));
}

TEST(ReadWholeFile, RefusesALink) {
  TempDir dir;
  WriteText(dir.path() / "real", "bytes");
  std::filesystem::create_symlink(dir.path() / "real", dir.path() / "link");
  auto read = ReadWholeFile(dir.path() / "link");
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error().message, HasSubstr("symbolic link"));
}

TEST(TrustedIndex, IsOwnedByTheUserOrTheDataOwnerAndWrittenByNoOneElse) {
  TempDir dir;
  const auto index = dir.path() / "a.tar.gpufs-index";
  WriteText(index, "index");
  ASSERT_EQ(chmod(index.c_str(), 0644), 0);
  EXPECT_TRUE(OpenTrustedIndex(index, 4242).ok());
  ASSERT_EQ(chmod(index.c_str(), 0664), 0);
  auto group_writable = OpenTrustedIndex(index, 4242);
  ASSERT_FALSE(group_writable.ok());
  EXPECT_EQ(group_writable.error().message, "others may write it (mode 0664)");
  ASSERT_EQ(chmod(index.c_str(), 0644), 0);
  if (geteuid() == 0) {
    ASSERT_EQ(chown(index.c_str(), kNobody, kNobody), 0);
    auto foreign = OpenTrustedIndex(index, 4242);
    ASSERT_FALSE(foreign.ok());
    EXPECT_THAT(foreign.error().message, StartsWith("it is owned by uid 65534"));
    EXPECT_TRUE(OpenTrustedIndex(index, kNobody).ok());  // the archive's owner wrote it
  }
  std::filesystem::create_symlink(index, dir.path() / "link");
  auto link = OpenTrustedIndex(dir.path() / "link", geteuid());
  ASSERT_FALSE(link.ok());
  EXPECT_EQ(link.error().message, "it is a symbolic link");
}

// A mytar folder of one file in one group, parsed from its text.
Result<Dataset> OneFileMytar(const std::filesystem::path& dir) {
  WriteText(dir / "metadata.txt", "1\ncat\nfilegroup-0.mytar,1\n0,cat,0,4,/data/train/cat/a.jpg\n");
  WriteText(dir / "filegroup-0.mytar", "abcd");
  return OpenMytarText(dir);
}

// What an index of `text` records beside it.
IndexInfo IndexInfoOf(const Dataset& text, const std::filesystem::path& dir) {
  IndexInfo info;
  info.source = *StampOf(dir / "metadata.txt");
  info.blobs = text.blobs;
  return info;
}

TEST(TrustedIndex, AMytarIndexOthersMayWriteIsIgnoredForTheText) {
  TempDir dir;
  auto text = OneFileMytar(dir.path());
  ASSERT_TRUE(text.ok()) << text.error().message;
  const IndexInfo info = IndexInfoOf(*text, dir.path());
  const auto index = dir.path() / "index.gpufs";
  ASSERT_TRUE(WriteNativeIndex(text->catalog, info, index, FileAccess::Shared(0644)).ok());
  auto trusted = OpenDataset(dir.path(), {});
  ASSERT_TRUE(trusted.ok()) << trusted.error().message;
  EXPECT_EQ(trusted->format, "mytar+index");
  ASSERT_EQ(chmod(index.c_str(), 0666), 0);
  auto ignored = OpenDataset(dir.path(), {});
  ASSERT_TRUE(ignored.ok()) << ignored.error().message;
  EXPECT_EQ(ignored->format, "mytar");
  ASSERT_FALSE(ignored->notes.empty());
  EXPECT_THAT(ignored->notes.front(),
              StartsWith("not using " + index.string() + ": others may write it (mode 0666)"));
}

// An index in the private cache is read beneath the cache folder's checked descriptor: a
// folder put in its place after the cache was checked (by whoever owns a folder above it)
// is refused, not read.
TEST(TrustedIndex, ACachedIndexIsReadOnlyFromAPrivateFolder) {
  TempDir dir;
  auto text = OneFileMytar(dir.path());
  ASSERT_TRUE(text.ok()) << text.error().message;
  const IndexInfo info = IndexInfoOf(*text, dir.path());
  const auto cache = dir.path() / "cache";
  const auto index = cache / "a.tar-0123456789abcdef.gpufs-index";
  ASSERT_TRUE(WriteNativeIndex(text->catalog, info, index, FileAccess::Private()).ok());
  std::vector<std::string> notes;
  EXPECT_TRUE(OpenIndexAt(IndexPlace{index}, notes).ok());
  ASSERT_EQ(chmod(cache.c_str(), 0777), 0);
  auto shared = OpenIndexAt(IndexPlace{index}, notes);
  ASSERT_FALSE(shared.ok());
  EXPECT_THAT(shared.error().message, HasSubstr(cache.string()));
  EXPECT_THAT(shared.error().message, HasSubstr("writable by others"));
  if (geteuid() == 0) {
    ASSERT_EQ(chmod(cache.c_str(), 0700), 0);
    ASSERT_EQ(chown(cache.c_str(), kNobody, kNobody), 0);
    auto foreign = OpenIndexAt(IndexPlace{index}, notes);
    ASSERT_FALSE(foreign.ok());
    EXPECT_THAT(foreign.error().message, HasSubstr("owned by uid 65534"));
  }
}

// A daemon started without HOME (by slurmd, or a system unit) keeps its caches in its
// user's home, not in /tmp where another user could make the folder first.
TEST(DefaultCacheDir, WithoutHomeIsTheUsersHomeNotTmp) {
  const auto saved = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    return value ? std::optional<std::string>(value) : std::nullopt;
  };
  const auto xdg = saved("XDG_CACHE_HOME");
  const auto home = saved("HOME");
  unsetenv("XDG_CACHE_HOME");
  unsetenv("HOME");
  const std::filesystem::path dir = DefaultCacheDir();
  if (xdg) setenv("XDG_CACHE_HOME", xdg->c_str(), 1);
  if (home) setenv("HOME", home->c_str(), 1);
  const passwd* entry = getpwuid(geteuid());
  if (entry == nullptr || !std::filesystem::is_directory(entry->pw_dir)) {
    GTEST_SKIP() << "this user has no home folder";
  }
  EXPECT_EQ(dir, std::filesystem::path(entry->pw_dir) / ".cache" / "gpufs");
}

}  // namespace
}  // namespace gpufs
