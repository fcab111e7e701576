#include "dataset/format/mytar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;

constexpr char kGood[] =
    "2\n"
    "cat\n"
    "dog\n"
    "filegroup-0.mytar,2\n"
    "0,dog,0,10,/data/train/dog/d1.jpg\n"
    "1,cat,10,5,/data/train/cat/sub/c1.jpg\n"
    "filegroup-1.mytar,2\n"
    "0,cat,0,7,/data/train/cat/c2.jpg\n"
    "1,dog,7,3,/data/train/dog/d2.jpg\n";

std::string ParseError(std::string_view text) {
  auto spec = ParseMytarIndex(text, "metadata.txt");
  EXPECT_FALSE(spec.ok()) << "accepted:\n" << text;
  return spec.ok() ? "" : spec.error().message;
}

TEST(MytarIndex, ParsesClassesGroupsAndMembers) {
  auto spec = ParseMytarIndex(kGood, "metadata.txt");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_THAT(spec->classes, ::testing::ElementsAre("cat", "dog"));
  ASSERT_EQ(spec->groups.size(), 2u);
  EXPECT_EQ(spec->groups[0].blob, "filegroup-0.mytar");
  EXPECT_EQ(spec->groups[0].size, 15u);
  EXPECT_EQ(spec->groups[1].size, 10u);
  ASSERT_EQ(spec->members.size(), 4u);
  EXPECT_EQ(spec->members[1].path, "cat/sub/c1.jpg");
  EXPECT_EQ(spec->members[1].class_id, 0u);
  EXPECT_EQ(spec->members[1].offset, 10u);
  EXPECT_EQ(spec->members[1].size, 5u);
  EXPECT_EQ(spec->members[1].line, 6u);
  EXPECT_EQ(spec->members[3].group, 1u);
}

TEST(MytarIndex, AcceptsCrlfAndTrailingBlankLines) {
  std::string text = kGood;
  std::string crlf;
  for (char c : text) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  auto spec = ParseMytarIndex(crlf + "\r\n\n", "metadata.txt");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->members.size(), 4u);
}

TEST(MytarIndex, MatchesClassNamesHoldingCommas) {
  auto spec = ParseMytarIndex(
      "2\na,b\na\nfilegroup-0.mytar,2\n0,a,b,0,1,/r/a,b/x,1.jpg\n1,a,1,1,/r/a/y.jpg\n",
      "metadata.txt");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->members[0].path, "a,b/x,1.jpg");
  EXPECT_EQ(spec->members[1].path, "a/y.jpg");
}

TEST(MytarIndex, InfersTheShortestRootWhenASubfolderIsNamedLikeItsClass) {
  auto spec = ParseMytarIndex(
      "1\ncat\nfilegroup-0.mytar,2\n0,cat,0,1,/d/cat/cat/a.jpg\n1,cat,1,1,/d/cat/cat/b.jpg\n",
      "metadata.txt");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->members[0].path, "cat/cat/a.jpg");
}

TEST(MytarIndex, AcceptsRelativeOriginalPathsAndDoubleSlashes) {
  auto spec = ParseMytarIndex(
      "1\ncat\nfilegroup-0.mytar,2\n0,cat,0,1,cat/a.jpg\n1,cat,1,1,cat//b.jpg\n", "m");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->members[1].path, "cat/b.jpg");
}

TEST(MytarIndex, RefusesAnEmptyFile) { EXPECT_THAT(ParseError(""), HasSubstr("empty")); }

TEST(MytarIndex, RefusesABadClassCount) {
  EXPECT_THAT(ParseError("two\ncat\n"), HasSubstr("metadata.txt line 1: expected the number"));
  EXPECT_THAT(ParseError("0\n"), HasSubstr("line 1: the dataset declares no classes"));
  EXPECT_THAT(ParseError("3\ncat\ndog\n"), HasSubstr("3 classes are declared but the file ends"));
}

TEST(MytarIndex, RefusesDuplicateAndInvalidClassNames) {
  EXPECT_THAT(ParseError("2\ncat\ncat\n"),
              HasSubstr("line 3: class 'cat' is already declared at line 2"));
  EXPECT_THAT(ParseError("1\n..\n"), HasSubstr("line 2: class name '..' is invalid"));
  EXPECT_THAT(ParseError("1\na/b\n"), HasSubstr("contains '/'"));
  EXPECT_THAT(ParseError("1\n" + std::string(256, 'x') + "\n"), HasSubstr("longer than 255"));
}

TEST(MytarIndex, RefusesBadGroupHeaders) {
  EXPECT_THAT(ParseError("1\ncat\nfilegroup-0.mytar\n"), HasSubstr("line 3: expected a group"));
  EXPECT_THAT(ParseError("1\ncat\nfilegroup-0.mytar,x\n"), HasSubstr("invalid member count 'x'"));
  EXPECT_THAT(ParseError("1\ncat\nfilegroup-0.mytar,0\n"), HasSubstr("invalid member count '0'"));
  EXPECT_THAT(ParseError("1\ncat\n../evil.mytar,1\n0,cat,0,1,/r/cat/a\n"),
              HasSubstr("blob name '../evil.mytar' is invalid"));
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,0,1,/r/cat/a\nb,1\n0,cat,0,1,/r/cat/c\n"),
              HasSubstr("line 5: blob 'b' is already declared at line 3"));
}

TEST(MytarIndex, RefusesAGroupWithFewerMembersThanDeclared) {
  EXPECT_THAT(ParseError("1\ncat\nb,3\n0,cat,0,1,/r/cat/a\n1,cat,1,1,/r/cat/b\n"),
              HasSubstr("line 3: group 'b' declares 3 members but the file ends after 2"));
  EXPECT_THAT(ParseError("1\ncat\nb,3\n0,cat,0,1,/r/cat/a\nc,1\n0,cat,0,1,/r/cat/b\n"),
              HasSubstr("line 5: expected a member"));
}

TEST(MytarIndex, RefusesMembersOutOfOrder) {
  EXPECT_THAT(ParseError("1\ncat\nb,2\n1,cat,0,1,/r/cat/a\n0,cat,1,1,/r/cat/b\n"),
              HasSubstr("line 4: member index 1 where 0 was expected"));
}

TEST(MytarIndex, RefusesAnUnknownClass) {
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cow,0,1,/r/cow/a\n"),
              HasSubstr("line 4: unknown class 'cow'"));
}

TEST(MytarIndex, RefusesBadNumbers) {
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,-1,1,/r/cat/a\n"), HasSubstr("line 4: expected"));
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,0,1x,/r/cat/a\n"), HasSubstr("line 4: expected"));
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,18446744073709551615,2,/r/cat/a\n"),
              HasSubstr("overflows"));
}

TEST(MytarIndex, RefusesDotDotAndEmptyPaths) {
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,0,1,/r/cat/../../etc/passwd\n"),
              HasSubstr("line 4: path '/r/cat/../../etc/passwd' is invalid: segment '..'"));
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,0,1,/r/cat/./a\n"), HasSubstr("segment '.'"));
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,0,1,/r/cat/\n"), HasSubstr("names no file"));
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,0,1,\n"), HasSubstr("has no path"));
}

TEST(MytarIndex, RefusesAPathOutsideItsClassFolder) {
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,0,1,/r/dog/a\n"),
              HasSubstr("line 4: path '/r/dog/a' has no folder named after its class 'cat'"));
  EXPECT_THAT(ParseError("1\ncat\nb,2\n0,cat,0,1,/r/cat/a\n1,cat,1,1,/other/cat/b\n"),
              HasSubstr("line 5: path '/other/cat/b' is not in folder '/r/cat/'"));
}

TEST(MytarIndex, RefusesAnEmptyLineBetweenRecords) {
  EXPECT_THAT(ParseError("1\ncat\nb,1\n0,cat,0,1,/r/cat/a\n\nc,1\n0,cat,0,1,/r/cat/b\n"),
              HasSubstr("line 5: unexpected empty line"));
}

class MytarDatasetTest : public ::testing::Test {
 protected:
  void Write(const std::string& name, std::string_view bytes) {
    std::ofstream(dir_.path() / name, std::ios::binary) << bytes;
  }
  TempDir dir_;
};

TEST_F(MytarDatasetTest, ReadsAGoodDataset) {
  Write("metadata.txt", kGood);
  Write("filegroup-0.mytar", std::string(15, 'a'));
  Write("filegroup-1.mytar", std::string(10, 'b'));
  auto spec = ReadMytarDataset(dir_.path());
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  EXPECT_EQ(spec->dir, dir_.path());
}

TEST_F(MytarDatasetTest, RefusesAMissingBlobNamingItsLine) {
  Write("metadata.txt", kGood);
  Write("filegroup-0.mytar", std::string(15, 'a'));
  auto spec = ReadMytarDataset(dir_.path());
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.error().message, HasSubstr("filegroup-1.mytar"));
  EXPECT_THAT(spec.error().message, HasSubstr("metadata.txt line 7"));
  EXPECT_THAT(spec.error().message, HasSubstr("No such file"));
}

TEST_F(MytarDatasetTest, RefusesAShortBlob) {
  Write("metadata.txt", kGood);
  Write("filegroup-0.mytar", std::string(14, 'a'));
  Write("filegroup-1.mytar", std::string(10, 'b'));
  auto spec = ReadMytarDataset(dir_.path());
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.error().message, HasSubstr("it is 14 bytes but its members need 15"));
}

TEST_F(MytarDatasetTest, RefusesAMissingIndex) {
  auto spec = ReadMytarDataset(dir_.path());
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.error().message, HasSubstr("metadata.txt: No such file"));
}

TEST_F(MytarDatasetTest, ResolvesTheOnlyGroupSizeFolder) {
  std::filesystem::create_directory(dir_.path() / "4");
  Write("4/metadata.txt", kGood);
  auto dir = ResolveMytarDir(dir_.path(), std::nullopt);
  ASSERT_TRUE(dir.ok()) << dir.error().message;
  EXPECT_EQ(*dir, dir_.path() / "4");
}

TEST_F(MytarDatasetTest, AsksForAGroupSizeWhenSeveralExist) {
  for (const char* g : {"16", "4"}) {
    std::filesystem::create_directory(dir_.path() / g);
    Write(std::string(g) + "/metadata.txt", kGood);
  }
  auto dir = ResolveMytarDir(dir_.path(), std::nullopt);
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.error().message, HasSubstr("several group sizes (4, 16)"));
  EXPECT_THAT(dir.error().message, HasSubstr("--group-size"));
  auto picked = ResolveMytarDir(dir_.path(), 16);
  ASSERT_TRUE(picked.ok());
  EXPECT_EQ(*picked, dir_.path() / "16");
  auto missing = ResolveMytarDir(dir_.path(), 8);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message, HasSubstr("no group size 8 (found: 4, 16)"));
}

TEST_F(MytarDatasetTest, RefusesAFolderWithoutAnIndex) {
  auto dir = ResolveMytarDir(dir_.path(), std::nullopt);
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.error().message, HasSubstr("no metadata.txt"));
  EXPECT_FALSE(ResolveMytarDir(dir_.path() / "nope", std::nullopt).ok());
}

}  // namespace
}  // namespace gpufs
