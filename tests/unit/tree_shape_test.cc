#include "dataset/format/tree_shape.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpufs {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> TreePaths(const TreeShape& shape) {
  std::vector<std::string> out;
  for (const ShapedFile& f : shape.files) out.push_back(f.tree_path);
  return out;
}

TEST(TreeShape, TakesTopFoldersAsClasses) {
  auto shape = ShapeTree({"dog/1.jpg", "cat/sub/2.jpg", "cat/3.jpg", "README"}, SplitMode::kAuto,
                         false, "src");
  ASSERT_TRUE(shape.ok()) << shape.error().message;
  EXPECT_FALSE(shape->splits);
  EXPECT_THAT(shape->classes, ElementsAre("cat", "dog"));
  EXPECT_THAT(shape->folders, ElementsAre("cat", "dog"));
  EXPECT_THAT(TreePaths(*shape), ElementsAre("dog/1.jpg", "cat/sub/2.jpg", "cat/3.jpg"));
  EXPECT_EQ(shape->files[0].class_id, 1u);
  EXPECT_EQ(shape->files[1].input, 1u);
  EXPECT_THAT(shape->outside, ElementsAre("README"));
}

TEST(TreeShape, KeepsSplitsAboveClasses) {
  auto shape = ShapeTree({"train/dog/1.jpg", "train/cat/2.jpg", "val/cat/3.jpg", "val/x.txt"},
                         SplitMode::kAuto, false, "src");
  ASSERT_TRUE(shape.ok());  // val/ holds a file directly: top folders are classes
  EXPECT_FALSE(shape->splits);
  EXPECT_THAT(shape->classes, ElementsAre("train", "val"));
  shape = ShapeTree({"train/dog/1.jpg", "train/cat/2.jpg", "val/cat/3.jpg", "val/bird/4.jpg"},
                    SplitMode::kAuto, false, "src");
  ASSERT_TRUE(shape.ok()) << shape.error().message;
  EXPECT_TRUE(shape->splits);
  EXPECT_THAT(shape->classes, ElementsAre("bird", "cat", "dog"));
  EXPECT_THAT(shape->folders, ElementsAre("train/cat", "train/dog", "val/bird", "val/cat"));
  EXPECT_EQ(shape->files[3].class_id, 0u);
}

TEST(TreeShape, LetsTheCallerForceOrRefuseSplits) {
  const std::vector<std::string> paths = {"a/x/1.jpg", "b/y/2.jpg"};
  EXPECT_TRUE(ShapeTree(paths, SplitMode::kAuto, false, "src")->splits);
  auto flat = ShapeTree(paths, SplitMode::kNoSplits, false, "src");
  ASSERT_TRUE(flat.ok());
  EXPECT_THAT(flat->classes, ElementsAre("a", "b"));
  EXPECT_THAT(TreePaths(*flat), ElementsAre("a/x/1.jpg", "b/y/2.jpg"));
}

TEST(TreeShape, LooksThroughWrapperFoldersOfArchives) {
  auto shape = ShapeTree(
      {"imagenette2/train/cat/1.jpg", "imagenette2/val/cat/2.jpg", "imagenette2/noisy.csv"},
      SplitMode::kAuto, true, "a.tar");
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->stripped, "imagenette2/");
  EXPECT_TRUE(shape->splits);
  EXPECT_THAT(TreePaths(*shape), ElementsAre("train/cat/1.jpg", "val/cat/2.jpg"));
  EXPECT_THAT(shape->outside, ElementsAre("imagenette2/noisy.csv"));
  // One class with files is not a wrapper.
  shape = ShapeTree({"cat/1.jpg", "cat/2.jpg"}, SplitMode::kAuto, true, "a.tar");
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->stripped, "");
  EXPECT_THAT(shape->classes, ElementsAre("cat"));
}

TEST(TreeShape, RefusesASourceWithoutClassFolders) {
  auto shape = ShapeTree({"1.jpg", "2.jpg"}, SplitMode::kAuto, false, "/data/x");
  ASSERT_FALSE(shape.ok());
  EXPECT_THAT(shape.error().message, ::testing::HasSubstr("/data/x: no class folders"));
  EXPECT_FALSE(ShapeTree({}, SplitMode::kAuto, false, "/data/x").ok());
}

}  // namespace
}  // namespace gpufs
