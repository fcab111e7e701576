#include "dataset/catalog.h"
#include "dataset/catalog_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace gpufs {
namespace {

using ::testing::HasSubstr;

DatasetSpec Spec(std::vector<std::string> classes, std::vector<std::string> paths) {
  DatasetSpec spec;
  spec.index_file = "metadata.txt";
  spec.classes = std::move(classes);
  spec.groups.push_back(GroupSpec{"filegroup-0.mytar", 0, 0, 3});
  uint32_t line = 4;
  uint64_t offset = 0;
  for (std::string& path : paths) {
    spec.members.push_back(MemberSpec{std::move(path), 0, 0, offset, 10, 0, line++});
    offset += 10;
  }
  return spec;
}

std::vector<std::string> ChildNames(const Catalog& c, NodeId dir) {
  std::vector<std::string> names;
  for (uint32_t i = 0; i < c.ChildCount(dir); ++i) names.emplace_back(c.Name(c.ChildAt(dir, i)));
  return names;
}

TEST(Catalog, ListsEveryClassEvenWithoutMembers) {
  auto c = CatalogFromSpec(Spec({"b", "a", "empty"}, {"b/x.jpg", "a/y.jpg"}));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_THAT(ChildNames(*c, Catalog::kRoot), ::testing::ElementsAre("a", "b", "empty"));
  EXPECT_EQ(c->file_count(), 2u);
  EXPECT_EQ(c->dir_count(), 4u);
  EXPECT_EQ(c->total_bytes(), 20u);
}

TEST(Catalog, KeepsChildrenContiguousAndSortedByBytes) {
  auto c = CatalogFromSpec(Spec(
      {"a"}, {"a/zeta", "a/Alpha", "a/\xc3\xa9t\xc3\xa9", "a/-dash", "a/sub/deep.jpg", "a/b c"}));
  ASSERT_TRUE(c.ok()) << c.error().message;
  auto a = c->Find(Catalog::kRoot, "a");
  ASSERT_TRUE(a);
  EXPECT_THAT(ChildNames(*c, *a),
              ::testing::ElementsAre("-dash", "Alpha", "b c", "sub", "zeta", "\xc3\xa9t\xc3\xa9"));
  EXPECT_EQ(c->SubdirCount(*a), 1u);
  EXPECT_EQ(c->SubdirCount(Catalog::kRoot), 1u);
}

TEST(Catalog, OrdersAFolderBeforeSiblingsItPrefixes) {
  // Whole-path order would put "a-c/..." and "a.b/..." before "a/..." ('-' < '.' < '/').
  auto c = CatalogFromSpec(
      Spec({"a.b", "a-c", "a"}, {"a-c/y", "a/z", "a.b/w", "a/long_common_prefix_0001.jpeg",
                                 "a/long_common_prefix_0001.jpg", "a/long_common_prefix_0001/x"}));
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_THAT(ChildNames(*c, Catalog::kRoot), ::testing::ElementsAre("a", "a-c", "a.b"));
  EXPECT_THAT(ChildNames(*c, *c->Find(Catalog::kRoot, "a")),
              ::testing::ElementsAre("long_common_prefix_0001", "long_common_prefix_0001.jpeg",
                                     "long_common_prefix_0001.jpg", "z"));
  EXPECT_TRUE(c->FindPath("a/long_common_prefix_0001/x"));
  EXPECT_TRUE(c->FindPath("a-c/y"));
}

TEST(Catalog, FindsNodesByNameAndPath) {
  auto c = CatalogFromSpec(Spec({"a", "b"}, {"a/sub/x.jpg", "b/y.jpg"}));
  ASSERT_TRUE(c.ok());
  auto x = c->FindPath("a/sub/x.jpg");
  ASSERT_TRUE(x);
  EXPECT_FALSE(c->IsDir(*x));
  EXPECT_EQ(c->PathOf(*x), "a/sub/x.jpg");
  EXPECT_EQ(c->Extent(*x).offset, 0u);
  EXPECT_EQ(c->Extent(*c->FindPath("b/y.jpg")).offset, 10u);
  EXPECT_FALSE(c->FindPath("a/sub/nope"));
  EXPECT_FALSE(c->Find(*x, "child-of-a-file"));
  EXPECT_EQ(c->Parent(*c->FindPath("a/sub")), *c->FindPath("a"));
}

TEST(Catalog, RefusesADuplicatePathNamingBothLines) {
  auto c = CatalogFromSpec(Spec({"a"}, {"a/x.jpg", "a/y.jpg", "a/x.jpg"}));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.error().message,
              HasSubstr("metadata.txt: path 'a/x.jpg' at line 6 is already used at line 4"));
}

TEST(Catalog, RefusesAPathThatIsBothFileAndFolder) {
  auto c = CatalogFromSpec(Spec({"a"}, {"a/x", "a/x/y.jpg"}));
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.error().message, HasSubstr("'x' at line 5 is a file at line 4"));
}

}  // namespace
}  // namespace gpufs
