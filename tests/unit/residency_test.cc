#include "fs/residency.h"

#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "cli/stat/stat_report.h"
#include "dataset/catalog_builder.h"
#include "fs/control.h"
#include "fs/metrics.h"
#include "fs/page_cache.h"
#include "source/local_source.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two classes in two groups: group 0 holds a/x (2 pages) and a/y (1 page), group 1 holds
// b/z (3 pages) and a/sub/w (1 page). Served through a group cache without prefetch.
class ResidencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"a", "b"};
    const std::vector<std::tuple<std::string, uint32_t, uint32_t, uint64_t>> members = {
        {"a/x", 0, 0, 5000}, {"a/y", 0, 0, 3000}, {"b/z", 1, 1, 10000}, {"a/sub/w", 0, 1, 100}};
    std::vector<std::string> blobs(2);
    for (const auto& [path, class_id, group, size] : members) {
      spec.members.push_back(MemberSpec{path, class_id, group, blobs[group].size(), size, 0, 0});
      blobs[group] += std::string(size, static_cast<char>('a' + spec.members.size()));
    }
    for (uint32_t g = 0; g < 2; ++g) {
      const std::string name = "blob-" + std::to_string(g);
      spec.groups.push_back(GroupSpec{name, 0, blobs[g].size(), 0});
      std::ofstream(dir_.path() / name, std::ios::binary) << blobs[g];
    }
    catalog_ = std::make_unique<Catalog>(std::move(*CatalogFromSpec(spec)));
    blobs_ = std::make_unique<BlobFiles>(dir_.path(), catalog_->blobs());
    arena_ = std::move(*PinnedArena::Create(1 << 20));
    source_ = std::make_unique<LocalSource>(*blobs_, engine_);
    cache_ = std::make_unique<GroupCache>(*catalog_, *source_, *arena_,
                                          MakePolicy("lru", {2, 2}, 4), CacheOptions{"lru", 0, 0});
    fs_ = std::make_unique<Filesystem>(*catalog_, *source_, ServeOptions{}, cache_.get());
  }

  uint64_t Ino(std::string_view path) { return Filesystem::InoOf(*catalog_->FindPath(path)); }

  void ReadWhole(std::string_view path) {
    auto data = fs_->Fetch(Ino(path), 0, 1 << 20);
    ASSERT_TRUE(data.ok()) << data.error().message;
  }

  ResidencyReport Ask(ResidencyQuery query, std::vector<std::string>* listed = nullptr) {
    auto report = Residency(*fs_, query, [&](const FileResidency& f) {
      if (listed) {
        listed->push_back(std::string(f.path) + (f.pinned ? " p" : " -") +
                          (f.kernel_known ? "k" : "-"));
      }
    });
    EXPECT_TRUE(report.ok()) << report.error().message;
    return report.ok() ? *report : ResidencyReport{};
  }

  std::string Control(const std::string& request) {
    std::string reply;
    HandleControlRequest(*fs_, request, [&reply](std::string_view piece) { reply += piece; });
    return reply;
  }

  TempDir dir_;
  PreadEngine engine_{1};
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<BlobFiles> blobs_;
  std::unique_ptr<LocalSource> source_;
  std::unique_ptr<PinnedArena> arena_;
  std::unique_ptr<GroupCache> cache_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(ResidencyTest, CountsThePagesOfEveryFileWhoseGroupIsPinned) {
  ResidencyReport before = Ask({});
  EXPECT_EQ(before.files, 4u);
  EXPECT_EQ(before.dirs, 4u);  // the root, a, a/sub, b
  EXPECT_EQ(before.pinned.total, 7u);
  EXPECT_EQ(before.pinned.resident, 0u);
  ReadWhole("a/y");
  EXPECT_EQ(Ask({}).pinned.resident, 3u);  // a/x and a/y came together
  ResidencyReport a = Ask({"a/"});
  EXPECT_EQ(a.files, 3u);
  EXPECT_EQ(a.dirs, 2u);
  EXPECT_EQ(a.pinned.resident, 3u);
  EXPECT_EQ(a.pinned.total, 4u);
  ResidencyReport w = Ask({"/a/sub/w"});
  EXPECT_EQ(w.files, 1u);
  EXPECT_EQ(w.dirs, 0u);
  EXPECT_EQ(w.pinned.resident, 0u);
}

TEST_F(ResidencyTest, ListsOnlyTheFilesTheKernelHoldsUnlessAskedForAll) {
  ReadWhole("b/z");
  fs_->Remember(Ino("a/y"));
  std::vector<std::string> kernel, all;
  Ask({"", ListFiles::kKernelKnown}, &kernel);
  EXPECT_THAT(kernel, ElementsAre("a/y -k"));
  Ask({"", ListFiles::kAll}, &all);
  EXPECT_THAT(all, ElementsAre("a/sub/w p-", "a/x --", "a/y -k", "b/z p-"));
  fs_->Forget(Ino("a/y"), 1);
  kernel.clear();
  Ask({"", ListFiles::kKernelKnown}, &kernel);
  EXPECT_TRUE(kernel.empty());
}

TEST_F(ResidencyTest, SummarizesByClassAndByGroup) {
  ReadWhole("a/x");
  ResidencyReport by_class = Ask({"", ListFiles::kNone, GroupBy::kClass});
  ASSERT_EQ(by_class.buckets.size(), 2u);
  EXPECT_EQ(by_class.buckets[0].files, 3u);  // a
  EXPECT_EQ(by_class.buckets[0].pinned.resident, 3u);
  EXPECT_EQ(by_class.buckets[1].pinned.resident, 0u);  // b
  ResidencyReport by_group = Ask({"a", ListFiles::kNone, GroupBy::kGroup});
  ASSERT_EQ(by_group.buckets.size(), 2u);
  EXPECT_EQ(by_group.buckets[0].files, 2u);
  EXPECT_EQ(by_group.buckets[1].files, 1u);  // a/sub/w
  EXPECT_EQ(by_group.buckets[1].pinned.total, 1u);
}

TEST_F(ResidencyTest, RefusesAPathThatIsNotInTheMount) {
  auto report = Residency(*fs_, {"a/nothing"}, [](const FileResidency&) {});
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.error().code, ENOENT);
}

TEST_F(ResidencyTest, ControlAnswersWithAHeaderThenALinePerFile) {
  ReadWhole("a/x");
  fs_->Remember(Ino("a/x"));
  const std::string reply = Control(R"({"op":"residency","path":"a","list":"kernel"})");
  const size_t eol = reply.find('\n');
  const auto header = nlohmann::json::parse(reply.substr(0, eol));
  EXPECT_EQ(header["files"], 3);
  EXPECT_EQ(header["pinned"]["resident_pages"], 3);
  EXPECT_EQ(header["classes"], nlohmann::json::array({"a", "b"}));
  EXPECT_EQ(reply.substr(eol + 1), "pk- 5000 0 0 a/x\n");
  const auto stats = nlohmann::json::parse(Control(R"({"op":"stats"})"));
  EXPECT_EQ(stats["served"]["files"], 1);
  EXPECT_EQ(stats["served"]["bytes"], 5000);
  EXPECT_EQ(stats["cache"]["misses"], 1);
}

TEST_F(ResidencyTest, ControlRefusesMalformedRequests) {
  EXPECT_THAT(Control("not json"), HasSubstr("not a JSON object"));
  EXPECT_THAT(Control(R"({"op":"format"})"), HasSubstr("unknown op 'format'"));
  EXPECT_THAT(Control(R"({"op":"residency","list":"some"})"), HasSubstr("unknown list 'some'"));
  EXPECT_THAT(Control(R"({"op":"residency","path":7})"), HasSubstr("cannot read the request"));
  EXPECT_THAT(Control(R"({"op":"residency","path":"c"})"), HasSubstr("no c in the mount"));
}

TEST_F(ResidencyTest, MetricsAreInPrometheusTextFormat) {
  ReadWhole("b/z");
  const std::string text = MetricsText(*fs_);
  EXPECT_THAT(text, HasSubstr("# TYPE gpufs_served_files_total counter\n"
                              "gpufs_served_files_total 1\n"));
  EXPECT_THAT(text, HasSubstr("gpufs_cache_misses_total 1\n"));
  EXPECT_THAT(text, HasSubstr("gpufs_cache_source_bytes_total "));
  EXPECT_THAT(text, HasSubstr("gpufs_dataset_files 4\n"));
  // Every series exported is in the listing the guide's table is made from.
  const std::string listing = MetricsListing();
  std::istringstream lines(text);
  int families = 0;
  for (std::string line; std::getline(lines, line);) {
    if (!line.starts_with("# TYPE ")) continue;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    EXPECT_THAT(listing, HasSubstr("| `" + name + "` |")) << name << " is not in gpufsd metrics";
    ++families;
  }
  EXPECT_GT(families, 20);
}

TEST(KernelPages, CountsWhatThePageCacheHoldsBothWays) {
  TempDir dir;
  const std::string path = (dir.path() / "f").string();
  std::ofstream(path, std::ios::binary) << std::string(5 * 4096 + 1, 'x');
  auto counted = KernelPagesOf(path, false);
  auto mapped = KernelPagesOf(path, true);
  ASSERT_TRUE(counted.ok() && mapped.ok());
  EXPECT_EQ(counted->total, 6u);
  EXPECT_EQ(counted->resident, 6u);  // just written
  EXPECT_EQ(mapped->resident, 6u);
  EXPECT_EQ(mapped->pages, std::vector<bool>(6, true));
  const int fd = open(path.c_str(), O_RDONLY);
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  auto dropped = KernelPagesOf(path, false);
  ASSERT_TRUE(dropped.ok());
  if (dropped->resident == 6) GTEST_SKIP() << dir.path() << " ignores POSIX_FADV_DONTNEED (tmpfs)";
  EXPECT_EQ(dropped->resident, 0u);
  EXPECT_EQ(KernelPagesOf(path, true)->resident, 0u);
  EXPECT_EQ(KernelPagesOf((dir.path() / "none").string(), false).error().code, ENOENT);
}

TEST(StatReport, DrawsVmtouchChartsAndSizes) {
  EXPECT_EQ(ResidencyChart({true, false, true, true}), "O OO");
  EXPECT_EQ(ResidencyChart(std::vector<bool>(60, true)), std::string(60, 'O'));
  std::vector<bool> pages(121, false);  // 3 pages a column: 41 columns
  pages[0] = pages[1] = pages[2] = true;
  pages[4] = true;
  EXPECT_EQ(ResidencyChart(pages), "Oo" + std::string(39, ' '));
  EXPECT_EQ(PrettySize(16384), "16K");
  EXPECT_EQ(PrettySize(1000), "1000");
  EXPECT_EQ(PrettySize(uint64_t{375} << 20), "375M");
}

}  // namespace
}  // namespace gpufs
