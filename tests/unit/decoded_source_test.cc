#include "source/decode/decoded_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libdeflate.h>

#include <string>
#include <vector>

#include "tests/unit/deflate_bytes.h"
#include "tests/unit/fake_source.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;

std::string Text(size_t n, char seed) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += static_cast<char>(seed + (i * 7 + i / 13) % 23);
  return s;
}

// A zip-like blob: 100 bytes served as they lie, then two deflated members laid back to
// back in decoded space at 4096, then a stored one copied into a second decoded group at
// 8192, with a gap between the two.
struct Archive {
  std::string stored;
  std::string a = Text(1000, 'a'), b = Text(700, 'k'), c = Text(300, 'A');
  DecodePlan plan;

  Archive() {
    stored = std::string(100, 'S');
    const std::string da = Deflate(a), db = Deflate(b);
    const uint64_t at_a = stored.size();
    stored += da;
    const uint64_t at_b = stored.size();
    stored += db;
    const uint64_t at_c = stored.size();
    stored += c;
    plan.blob = 0;
    plan.kind = DecodeKind::kZip;
    plan.stored_size = stored.size();
    plan.decoded_size = 8192 + c.size();
    plan.parts = {ZipPart{at_a, da.size(), a.size(), Crc(a), 8},
                  ZipPart{at_b, db.size(), b.size(), Crc(b), 8},
                  ZipPart{at_c, c.size(), c.size(), Crc(c), 0}};
    plan.recipes = {DecodeRecipe{.offset = 0, .size = 100, .stored_offset = 0, .stored_size = 100},
                    DecodeRecipe{.offset = 4096,
                                 .size = a.size() + b.size(),
                                 .stored_offset = at_a,
                                 .stored_size = at_c - at_a,
                                 .kind = DecodeKind::kZip,
                                 .first = 0,
                                 .count = 2},
                    DecodeRecipe{.offset = 8192,
                                 .size = c.size(),
                                 .stored_offset = at_c,
                                 .stored_size = c.size(),
                                 .kind = DecodeKind::kZip,
                                 .first = 2,
                                 .count = 1}};
  }
};

Result<std::string> ReadOf(BlobSource& source, uint64_t offset, size_t length) {
  std::string out(length, '?');
  auto n = source.Read(ReadKind::kGroup, 0, offset, length, out.data());
  if (!n) return n.error();
  out.resize(*n);
  return out;
}

std::string NameAt(uint32_t, uint64_t offset) { return "member@" + std::to_string(offset); }

TEST(DecodedSource, BytesAsStoredGoStraightToTheStoredSource) {
  Archive z;
  FakeSource fake({z.stored});
  DecodedSource source(fake, {z.plan}, NameAt);
  EXPECT_EQ(*ReadOf(source, 10, 50), z.stored.substr(10, 50));
  ASSERT_EQ(fake.calls().size(), 1u);
  EXPECT_EQ(fake.calls()[0].offset, 10u);
  EXPECT_EQ(fake.calls()[0].length, 50u);
}

// A stored source that takes only whole pages, as direct I/O does.
class PagedSource : public FakeSource {
 public:
  using FakeSource::FakeSource;
  size_t Alignment() const override { return 4096; }
  void Submit(ReadKind kind, std::vector<BlobRead> reads) override {
    for (BlobRead& r : reads) {
      if (r.offset % 4096 || r.length % 4096) {
        r.done(gpufs::Fail(EINVAL, "unaligned read of {} at {}", r.length, r.offset));
        continue;
      }
      FakeSource::Submit(kind, {std::move(r)});
    }
  }
};

TEST(DecodedSource, AnAlignedReadOverTheArchivesEndGoesToTheStoredSourceAligned) {
  Archive z;
  PagedSource paged({z.stored});
  DecodedSource source(paged, {z.plan}, NameAt);
  ASSERT_EQ(source.Alignment(), 4096u);  // a zip: its stored bytes pass as they lie
  auto got = ReadOf(source, 0, 4096);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(*got, z.stored + std::string(4096 - z.stored.size(), '\0'));
  FakeSource fake({z.stored});
  DecodedSource unaligned(fake, {z.plan}, NameAt);
  EXPECT_EQ(*ReadOf(unaligned, 0, 4096), *got);
}

TEST(DecodedSource, AGroupIsDecodedOnceForEveryReadOfIt) {
  Archive z;
  FakeSource fake({z.stored});
  DecodedSource source(fake, {z.plan}, NameAt);
  const std::string decoded = z.a + z.b;
  EXPECT_EQ(*ReadOf(source, 4096, 600), decoded.substr(0, 600));
  EXPECT_EQ(*ReadOf(source, 4096 + 600, 1100), decoded.substr(600));
  EXPECT_EQ(fake.group_reads(), 1u);  // the second read came from the decoded group
  const nlohmann::json stats = source.Stats();
  EXPECT_EQ(stats[source_stat::kDecodedGroups], 1);
  EXPECT_EQ(stats[source_stat::kDecodedBytes], decoded.size());
  EXPECT_EQ(stats[source_stat::kDecodeReuses], 1);
  EXPECT_EQ(stats[source_stat::kDecodeReadBytes], z.plan.recipes[1].stored_size);
  EXPECT_EQ(stats[source_stat::kDecodeErrors], 0);
  EXPECT_TRUE(stats[source_stat::kDecodeSeconds].is_number_float());
}

TEST(DecodedSource, ReadsThatOverlapDoNotEndAGroupBeforeEachByteWasCopiedOut) {
  Archive z;
  FakeSource fake({z.stored});
  DecodedSource source(fake, {z.plan}, NameAt);
  const std::string decoded = z.a + z.b;
  // As the group cache reads with its blocks aligned: the next group's first block reads
  // the end of this one again, before this one's last block is read.
  EXPECT_EQ(*ReadOf(source, 4096, 1000), decoded.substr(0, 1000));
  EXPECT_EQ(*ReadOf(source, 4096 + 900, 100), decoded.substr(900, 100));
  EXPECT_EQ(*ReadOf(source, 4096 + 1500, 200), decoded.substr(1500));
  EXPECT_EQ(*ReadOf(source, 4096 + 1500, 200), decoded.substr(1500));
  EXPECT_EQ(*ReadOf(source, 4096 + 1000, 500), decoded.substr(1000, 500));
  EXPECT_EQ(fake.group_reads(), 1u);
  // Every byte was copied out: it is not kept, and another read decodes it again.
  EXPECT_EQ(*ReadOf(source, 4096, 10), decoded.substr(0, 10));
  EXPECT_EQ(fake.group_reads(), 2u);
}

TEST(DecodedSource, BetweenGroupsAreZerosAndTheDecodedSpaceEndsTheRead) {
  Archive z;
  FakeSource fake({z.stored});
  DecodedSource source(fake, {z.plan}, NameAt);
  // From the last decoded byte of the first group, across the gap, into the second group
  // and past the end of decoded space.
  auto got = ReadOf(source, 4096 + 1699, 8192 + 400 - (4096 + 1699));
  ASSERT_TRUE(got) << got.error().message;
  std::string want = (z.a + z.b).substr(1699);
  want += std::string(8192 - (4096 + 1700), '\0');
  want += z.c;
  EXPECT_EQ(*got, want);  // short: the blob's decoded space ends at 8192 + 300
  EXPECT_EQ(source.Expected(0)->size, 8192 + z.c.size());
  EXPECT_THAT(source.Identity(0), HasSubstr("decoded=1"));
}

TEST(DecodedSource, ACrcMismatchFailsTheReadNamingTheMemberAndIsTriedAgain) {
  Archive z;
  z.plan.parts[1].crc32 ^= 1;
  FakeSource fake({z.stored});
  DecodedSource source(fake, {z.plan}, NameAt);
  auto got = ReadOf(source, 4096, 10);
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, EIO);
  EXPECT_THAT(got.error().message, HasSubstr("member@5096"));  // the second member
  EXPECT_FALSE(ReadOf(source, 4096, 10));
  EXPECT_EQ(fake.group_reads(), 2u);  // not kept: read again
  EXPECT_EQ(source.Stats()[source_stat::kDecodeErrors], 2);
}

TEST(DecodedSource, AFailingStoredReadFailsEveryReadOfTheGroup) {
  Archive z;
  FakeSource fake({z.stored});
  fake.Fail(0, EIO);
  DecodedSource source(fake, {z.plan}, NameAt);
  auto got = ReadOf(source, 8192, 100);
  ASSERT_FALSE(got);
  EXPECT_THAT(got.error().message, HasSubstr("injected"));
}

TEST(DecodedSource, AnArchiveShorterThanItsPlanIsAnErrorNotZeros) {
  Archive z;
  FakeSource fake({z.stored.substr(0, z.stored.size() - 50)});
  DecodedSource source(fake, {z.plan}, NameAt);
  auto got = ReadOf(source, 8192, 100);
  ASSERT_FALSE(got);
  EXPECT_THAT(got.error().message, HasSubstr("changed since it was indexed"));
}

TEST(DecodedSource, GroupsBeyondWhatItKeepsAreDecodedAgain) {
  Archive z;
  FakeSource fake({z.stored});
  DecodedSource source(fake, {z.plan}, NameAt, DecodedOptions{.keep_bytes = 1000});
  ASSERT_TRUE(ReadOf(source, 4096, 10));  // 1700 bytes: more than it keeps
  ASSERT_TRUE(ReadOf(source, 8192, 10));
  ASSERT_TRUE(ReadOf(source, 4096, 10));
  EXPECT_EQ(fake.group_reads(), 3u);
}

TEST(DecodedSource, BlobsWithoutAPlanPassThrough) {
  Archive z;
  FakeSource fake({z.stored, "plain bytes"});
  DecodedSource source(fake, {z.plan}, NameAt);
  std::string out(5, '?');
  ASSERT_TRUE(source.Read(ReadKind::kMember, 1, 6, 5, out.data()));
  EXPECT_EQ(out, "bytes");
  EXPECT_EQ(source.Expected(1), nullptr);
}

}  // namespace
}  // namespace gpufs
