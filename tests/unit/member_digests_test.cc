// What peers' bytes are checked against: ranges widened and cut at member bounds, and
// every whole member of a block hashed, so that no byte of a member is served unchecked.
#include "source/member_digests.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;

// One blob of 100 bytes: a at [10, 30), b at [30, 60), c at [70, 90), an empty d at 95;
// the bytes between (headers, padding) belong to no member.
class MemberDigestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (size_t i = 0; i < blob_.size(); ++i) blob_[i] = static_cast<char>('A' + i % 26);
    DatasetSpec spec;
    spec.index_file = "test";
    spec.classes = {"c"};
    spec.has_sha256 = true;
    spec.groups = {GroupSpec{"blob-0", 0, 100, 0}};
    const std::tuple<const char*, uint64_t, uint64_t> members[] = {
        {"c/a", 10, 20}, {"c/b", 30, 30}, {"c/c", 70, 20}, {"c/d", 95, 0}};
    uint32_t line = 1;
    for (const auto& [path, offset, size] : members) {
      MemberSpec m{path, 0, 0, offset, size, 0, line++};
      m.sha256 = Sha256Of(blob_.data() + offset, size);
      spec.members.push_back(m);
    }
    auto catalog = CatalogFromSpec(spec);
    ASSERT_TRUE(catalog.ok()) << catalog.error().message;
    auto digests = MemberDigests::FromCatalog(*catalog);
    ASSERT_TRUE(digests.ok()) << digests.error().message;
    digests_ = *digests;
  }

  std::string blob_ = std::string(100, '\0');
  std::shared_ptr<const MemberDigests> digests_;
};

TEST_F(MemberDigestsTest, WidensARangeToTheMembersItCuts) {
  EXPECT_EQ(digests_->Widen(0, 15, 40), (std::pair<uint64_t, uint64_t>{10, 60}));
  EXPECT_EQ(digests_->Widen(0, 30, 60), (std::pair<uint64_t, uint64_t>{30, 60}));
  EXPECT_EQ(digests_->Widen(0, 0, 5), (std::pair<uint64_t, uint64_t>{0, 5}));  // a header
  EXPECT_EQ(digests_->Widen(0, 62, 71), (std::pair<uint64_t, uint64_t>{62, 90}));
  EXPECT_EQ(digests_->Widen(0, 89, 100), (std::pair<uint64_t, uint64_t>{70, 100}));
  EXPECT_TRUE(digests_->WholeMembers(0, 10, 90));
  EXPECT_FALSE(digests_->WholeMembers(0, 10, 89));
}

TEST_F(MemberDigestsTest, FindsTheMemberAnOffsetFallsStrictlyInside) {
  EXPECT_EQ(digests_->Straddling(0, 15), (std::pair<uint64_t, uint64_t>{10, 30}));
  EXPECT_EQ(digests_->Straddling(0, 59), (std::pair<uint64_t, uint64_t>{30, 60}));
  EXPECT_FALSE(digests_->Straddling(0, 30));  // a and b meet there
  EXPECT_FALSE(digests_->Straddling(0, 10));
  EXPECT_FALSE(digests_->Straddling(0, 65));  // padding
  EXPECT_FALSE(digests_->Straddling(0, 100));
}

TEST_F(MemberDigestsTest, ChecksEveryWholeMemberOfABlock) {
  EXPECT_TRUE(digests_->Mismatches(0, 0, blob_.data(), 100).empty());
  EXPECT_TRUE(digests_->Mismatches(0, 10, blob_.data() + 10, 50).empty());
  std::string peer = blob_;
  peer[5] ^= 1;  // a header byte: never served, never checked
  EXPECT_TRUE(digests_->Mismatches(0, 0, peer.data(), 100).empty());
  peer[45] ^= 1;  // in b
  peer[80] ^= 1;  // in c
  auto bad = digests_->Mismatches(0, 0, peer.data(), 100);
  ASSERT_EQ(bad.size(), 2u);
  EXPECT_EQ(bad[0].path, "c/b");
  EXPECT_EQ(bad[0].offset, 30u);
  EXPECT_EQ(bad[0].size, 30u);
  EXPECT_EQ(bad[1].path, "c/c");
  EXPECT_EQ(digests_->Mismatches(0, 30, peer.data() + 30, 30).size(), 1u);
}

TEST(MemberDigestsRefusal, ACatalogWithoutDigestsIsRefused) {
  DatasetSpec spec;
  spec.index_file = "test";
  spec.classes = {"c"};
  spec.groups = {GroupSpec{"x.tar", 0, 10, 0}};
  spec.members = {MemberSpec{"c/a", 0, 0, 0, 10, 0, 1}};
  auto catalog = CatalogFromSpec(spec);
  auto digests = MemberDigests::FromCatalog(*catalog);
  ASSERT_FALSE(digests.ok());
  EXPECT_THAT(digests.error().message, HasSubstr("no SHA-256 of each file"));
}

}  // namespace
}  // namespace gpufs
