#include "fs/served_tree.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "dataset/catalog_builder.h"
#include "fs/filesystem.h"
#include "tests/unit/fake_source.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;

// train/{cat,dog} and val/{cat,dog}, three files; folders are ids 0 (the root), 1 train,
// 2 val, 3-4 train's, 5-6 val's.
class ServedTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"cat", "dog"};
    spec.folders = {"train/cat", "train/dog", "val/cat", "val/dog"};
    spec.groups = {GroupSpec{"blob-0", 0, 30, 0}, GroupSpec{"blob-1", 0, 20, 0}};
    spec.members = {MemberSpec{"train/cat/a.jpg", 0, 0, 0, 10, 0, 0},
                    MemberSpec{"train/dog/b b.jpg", 1, 0, 10, 20, 0, 0},
                    MemberSpec{"val/cat/c.jpg", 0, 1, 0, 20, 0, 0}};
    auto built = CatalogFromSpec(spec);
    ASSERT_TRUE(built.ok()) << built.error().message;
    base_ = std::make_unique<Catalog>(std::move(*built));
    dirs_.assign(base_->tables().dirs.begin(), base_->tables().dirs.end());
  }

  // The walk's verdict on the catalog with the folders as dirs_ now says.
  Status Walk() {
    CatalogTables t = base_->tables();
    t.dirs = dirs_;
    const Catalog catalog(t, nullptr);
    const Filesystem fs(catalog, source_, ServeOptions{});
    return CheckServedTree(fs, "the test index");
  }

  std::string WalkError() {
    Status s = Walk();
    EXPECT_FALSE(s.ok());
    return s.ok() ? "" : s.error().message;
  }

  NodeId Id(std::string_view path) { return *base_->FindPath(path); }

  std::unique_ptr<Catalog> base_;
  std::vector<CatalogDir> dirs_;
  FakeSource source_{{std::string(30, 'a'), std::string(20, 'b')}};
};

TEST_F(ServedTreeTest, WalksEveryNodeOfASoundCatalog) {
  Status s = Walk();
  EXPECT_TRUE(s.ok()) << s.error().message;
}

TEST_F(ServedTreeTest, RefusesARootWhoseDotDotIsAnotherFolder) {
  dirs_[0].parent = Id("train");
  EXPECT_THAT(WalkError(), HasSubstr("cannot serve the test index: the root lists '..' as inode "
                                     "2 (a folder), where inode 1 is meant"));
}

TEST_F(ServedTreeTest, RefusesAFolderWhoseDotDotIsAFile) {
  const NodeId cat = Id("train/cat");
  dirs_[cat].parent = static_cast<uint32_t>(dirs_.size());  // the first file
  EXPECT_THAT(WalkError(), HasSubstr("'train/cat' lists '..' as inode"));
}

TEST_F(ServedTreeTest, RefusesAFolderListedTwice) {
  dirs_[Id("val")].first_dir = dirs_[Id("train")].first_dir;  // val lists train's subfolders
  EXPECT_THAT(WalkError(), HasSubstr("'val/cat' is inode"));
}

TEST_F(ServedTreeTest, RefusesAListingOutOfNameOrder) {
  CatalogDir& cat = dirs_[Id("train/cat")];
  CatalogDir& dog = dirs_[Id("train/dog")];
  std::swap(cat.name_offset, dog.name_offset);
  std::swap(cat.name_size, dog.name_size);
  EXPECT_THAT(WalkError(), HasSubstr("'train' lists 'cat' after 'dog'"));
}

}  // namespace
}  // namespace gpufs
