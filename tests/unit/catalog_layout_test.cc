// The compact layout at scale and at its edges: a million files written to a native index
// and read back name by name and extent by extent; folders that hold both files and
// subfolders (two runs merged at readdir); files whose extents do not fit in u32s; files
// whose class is not their folder's.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "base/file_io.h"
#include "dataset/catalog.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/native_index.h"
#include "tests/fuzz/catalog_invariants.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

constexpr uint32_t kClasses = 1000;
constexpr uint32_t kPerClass = 1050;  // 1.05 M files
constexpr uint64_t kGroupBytes = 64u << 20;

std::string ClassName(uint32_t c) { return fmt::format("n{:08d}", c * 7919 % 100'000'000); }

// ImageNet's shape: "n01440764/n01440764_10026.JPEG"; members of 0 to 63 bytes in
// 64 MiB groups of one blob, in an order unrelated to the names.
std::string PathOf(uint32_t c, uint32_t m) {
  const std::string cls = ClassName(c);
  return fmt::format("{}/{}_{}.JPEG", cls, cls, (m * 37) % kPerClass + 1);
}

struct Expected {
  uint64_t offset;
  uint64_t size;
  uint32_t group;
};

Expected ExpectedOf(uint64_t k) {
  const uint64_t offset = k * 64;
  return Expected{offset, k % 64, static_cast<uint32_t>(offset / kGroupBytes)};
}

TEST(CatalogLayout, RoundTripsAMillionFilesThroughANativeIndex) {
  CatalogBuilder builder("scale", true, false);
  std::vector<std::string> classes;
  for (uint32_t c = 0; c < kClasses; ++c) classes.push_back(ClassName(c));
  builder.SetClasses(classes);
  const uint64_t files = uint64_t{kClasses} * kPerClass;
  for (uint64_t g = 0; g * kGroupBytes < files * 64; ++g) {
    builder.AddGroup("archive.tar", g * kGroupBytes, 0);
  }
  for (uint32_t m = 0; m < kPerClass; ++m) {  // members interleaved across classes
    for (uint32_t c = 0; c < kClasses; ++c) {
      const uint64_t k = uint64_t{m} * kClasses + c;
      const Expected e = ExpectedOf(k);
      ASSERT_TRUE(
          builder.AddFile(PathOf(c, m), MemberRecord{c, e.group, e.offset, e.size, k, 0}, nullptr));
    }
  }
  auto built = std::move(builder).Build();
  ASSERT_TRUE(built.ok()) << built.error().message;
  TempDir dir;
  IndexInfo info;
  info.blobs = {BlobInfo{files * 64, 0}};
  ASSERT_TRUE(
      WriteNativeIndex(*built, info, dir.path() / "index.gpufs", FileAccess::Shared()).ok());
  auto opened = OpenNativeIndex(dir.path() / "index.gpufs");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  const Catalog& c = opened->catalog;
  ASSERT_EQ(c.file_count(), files);
  ASSERT_EQ(c.dir_count(), kClasses + 1);
  // What a walk touches, beside the 40-byte folders: a name offset, a packed extent and the
  // suffix ("1050.JPEG") of each file.
  EXPECT_LT(c.tables().names.size(), files * 11);
  EXPECT_EQ(c.tables().file_classes.size(), 0u);  // every class is its folder's
  EXPECT_EQ(c.tables().wide.size(), 0u);
  for (uint32_t m = 0; m < kPerClass; ++m) {
    for (uint32_t cls = 0; cls < kClasses; ++cls) {
      const uint64_t k = uint64_t{m} * kClasses + cls;
      const std::string path = PathOf(cls, m);
      const auto id = c.FindPath(path);
      ASSERT_TRUE(id) << path;
      ASSERT_EQ(c.PathOf(*id), path);
      const uint32_t index = c.FileIndex(*id);
      const FileExtent f = c.ExtentAt(index);
      const Expected e = ExpectedOf(k);
      ASSERT_EQ(f.offset, e.offset) << path;
      ASSERT_EQ(f.size, e.size) << path;
      ASSERT_EQ(f.group, e.group) << path;
      ASSERT_EQ(c.ChecksumAt(index), k) << path;
      ASSERT_EQ(c.ClassAt(index), cls) << path;
      ASSERT_EQ(c.classes()[c.ClassAt(index)], ClassName(cls));
    }
  }
  // Each folder lists its files in name order, and every listed name is found again.
  for (NodeId d = 1; d < c.dir_count(); ++d) {
    ASSERT_EQ(c.ChildCount(d), kPerClass);
    for (uint32_t k = 1; k < kPerClass; ++k) {
      ASSERT_LT(c.Name(c.ChildAt(d, k - 1)), c.Name(c.ChildAt(d, k)));
    }
  }
}

Result<Catalog> MixedTree() {
  CatalogBuilder builder("mixed", false, false);
  builder.SetClasses({"a", "b"});
  builder.AddGroup("blob", 0, 0);
  // Folder "m" holds files and subfolders whose names interleave, and an empty folder.
  const char* paths[] = {"m/b.jpg", "m/a/x", "m/c/y", "m/d.jpg", "m/bb/z", "m/a.jpg", "top.txt"};
  uint64_t offset = 0;
  uint32_t line = 1;
  for (const char* p : paths) {
    if (Status s = builder.AddFile(p, MemberRecord{line % 2, 0, offset, 3, 0, line}, nullptr); !s) {
      return s.error();
    }
    offset += 3;
    ++line;
  }
  if (Status s = builder.AddFolder("m/empty"); !s) return s.error();
  if (Status s = builder.AddFolder("z_empty"); !s) return s.error();
  return std::move(builder).Build();
}

std::vector<std::string> Listing(const Catalog& c, NodeId dir) {
  std::vector<std::string> names;
  for (uint32_t k = 0; k < c.ChildCount(dir); ++k) {
    const NodeId child = c.ChildAt(dir, k);
    EXPECT_EQ(c.ChildName(dir, child), c.Name(child));
    names.push_back(c.Name(child));
  }
  return names;
}

TEST(CatalogLayout, MergesAFoldersFilesAndSubfoldersByName) {
  auto c = MixedTree();
  ASSERT_TRUE(c.ok()) << c.error().message;
  fuzz::CheckCatalog(*c);
  const NodeId m = *c->FindPath("m");
  EXPECT_THAT(Listing(*c, m),
              ::testing::ElementsAre("a", "a.jpg", "b.jpg", "bb", "c", "d.jpg", "empty"));
  EXPECT_THAT(Listing(*c, Catalog::kRoot), ::testing::ElementsAre("m", "top.txt", "z_empty"));
  EXPECT_EQ(c->SubdirCount(m), 4u);
  for (const char* path : {"m/a/x", "m/c/y", "m/bb/z", "m/d.jpg", "top.txt"}) {
    const auto id = c->FindPath(path);
    ASSERT_TRUE(id) << path;
    EXPECT_EQ(c->PathOf(*id), path);
  }
  EXPECT_FALSE(c->FindPath("m/a.jp"));
  EXPECT_FALSE(c->FindPath("m/b"));
  // Files of one folder differ in class: each keeps its own.
  ASSERT_EQ(c->tables().file_classes.size(), c->file_count());
  EXPECT_EQ(c->ClassAt(c->FileIndex(*c->FindPath("m/b.jpg"))), 1u);  // line 1
  EXPECT_EQ(c->ClassAt(c->FileIndex(*c->FindPath("m/d.jpg"))), 0u);  // line 4
}

TEST(CatalogLayout, KeepsExtentsThatDoNotFitInU32s) {
  CatalogBuilder builder("wide", false, false);
  builder.SetClasses({"a"});
  builder.AddGroup("blob", 1000, 0);
  constexpr uint64_t kBig = uint64_t{5} << 30;
  ASSERT_TRUE(builder.AddFile("a/small", MemberRecord{0, 0, 1000, 7, 0, 1}, nullptr));
  ASSERT_TRUE(builder.AddFile("a/huge", MemberRecord{0, 0, 2000, kBig, 0, 2}, nullptr));
  ASSERT_TRUE(builder.AddFile("a/far", MemberRecord{0, 0, 2000 + kBig, 9, 0, 3}, nullptr));
  auto built = std::move(builder).Build();
  ASSERT_TRUE(built.ok()) << built.error().message;
  TempDir dir;
  IndexInfo info;
  info.blobs = {BlobInfo{2009 + kBig, 0}};
  ASSERT_TRUE(
      WriteNativeIndex(*built, info, dir.path() / "index.gpufs", FileAccess::Shared()).ok());
  auto opened = OpenNativeIndex(dir.path() / "index.gpufs");
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  const Catalog& c = opened->catalog;
  EXPECT_EQ(c.tables().wide.size(), 2u);
  const FileExtent huge = c.Extent(*c.FindPath("a/huge"));
  EXPECT_EQ(huge.offset, 2000u);
  EXPECT_EQ(huge.size, kBig);
  const FileExtent far = c.Extent(*c.FindPath("a/far"));
  EXPECT_EQ(far.offset, 2000 + kBig);
  EXPECT_EQ(far.size, 9u);
  EXPECT_EQ(c.Extent(*c.FindPath("a/small")).size, 7u);
  EXPECT_EQ(c.total_bytes(), kBig + 16);
  EXPECT_EQ(c.Group(0).size, 1009 + kBig);
}

TEST(CatalogLayout, RefusesANameThatIsBothAFileAndAFolderOfOneFolder) {
  CatalogBuilder builder("clash", false, false);
  builder.SetClasses({"a"});
  builder.AddGroup("blob", 0, 0);
  ASSERT_TRUE(builder.AddFile("a/x", MemberRecord{0, 0, 0, 1, 0, 7}, nullptr));
  ASSERT_TRUE(builder.AddFile("a/x/y", MemberRecord{0, 0, 1, 1, 0, 9}, nullptr));
  auto built = std::move(builder).Build();
  ASSERT_FALSE(built.ok());
  EXPECT_THAT(built.error().message, ::testing::HasSubstr("'x' at line 9 is a file at line 7"));
}

}  // namespace
}  // namespace gpufs
