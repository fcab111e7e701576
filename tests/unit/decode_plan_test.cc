#include "dataset/compressed/decode_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "dataset/compressed/plan_file.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Plans = std::vector<DecodePlan>;

constexpr uint64_t kIndexChecksum = 0x0123456789abcdef;
constexpr SourceStamp kSource{6000, 1'700'000'000'123'456'789};
constexpr std::string_view kLabel = "/cache/a.zip.gpufs-index.plan";
const std::vector<uint64_t> kBlobSizes = {1000, 5000};

// The plan file's header, as plan_file.h lays it out: the fields a test rewrites.
constexpr size_t kHeaderSize = 72;
constexpr size_t kRecordSize = 88;
constexpr size_t kFileSizeAt = 16;
constexpr size_t kBodyChecksumAt = 24;
constexpr size_t kPlanCountAt = 56;
constexpr size_t kHeaderChecksumAt = 64;

DecodeRecipe Recipe(DecodeKind kind, uint64_t offset, uint64_t size, uint64_t stored_offset,
                    uint64_t stored_size, uint32_t first = 0, uint32_t count = 0) {
  DecodeRecipe r;
  r.offset = offset;
  r.size = size;
  r.stored_offset = stored_offset;
  r.stored_size = stored_size;
  r.kind = kind;
  r.first = first;
  r.count = count;
  return r;
}

// A zip of 1000 bytes: two runs served as they lie, and a run of a deflated member and a
// stored one laid out past the archive's end in decoded space.
DecodePlan ZipPlan() {
  DecodePlan plan;
  plan.blob = 0;
  plan.kind = DecodeKind::kZip;
  plan.stored_size = 1000;
  plan.decoded_size = 1250;
  plan.recipes = {Recipe(DecodeKind::kAsStored, 0, 100, 0, 100),
                  Recipe(DecodeKind::kAsStored, 300, 200, 300, 200),
                  Recipe(DecodeKind::kZip, 1000, 250, 100, 200, 0, 2)};
  plan.parts = {ZipPart{110, 80, 150, 0xdeadbeef, 8}, ZipPart{200, 100, 100, 0x1234, 0}};
  return plan;
}

// A gzip stream of 5000 bytes making 20000: a member's start, a point inside a byte with a
// window, and one at a byte boundary with another.
DecodePlan GzipPlan() {
  DecodePlan plan;
  plan.blob = 1;
  plan.kind = DecodeKind::kGzip;
  plan.stored_size = 5000;
  plan.decoded_size = 20000;
  plan.points = {GzipPoint{0, 0, kNoWindow, 0, 1}, GzipPoint{8000, 2000, 0, 3, 0},
                 GzipPoint{15000, 3500, 1, 0, 0}};
  plan.windows.resize(2 * kGzipWindow);
  for (size_t i = 0; i < plan.windows.size(); ++i) plan.windows[i] = static_cast<char>(i * 7);
  plan.recipes = {Recipe(DecodeKind::kGzip, 0, 8000, 0, 2001, 0),
                  Recipe(DecodeKind::kGzip, 8000, 5000, 1999, 1502, 1),
                  Recipe(DecodeKind::kGzip, 13000, 2000, 1999, 1600, 1),
                  Recipe(DecodeKind::kGzip, 15000, 5000, 3500, 1500, 2)};
  return plan;
}

Plans Sample() { return {ZipPlan(), GzipPlan()}; }

template <typename T>
bool SameBytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

void ExpectSame(const DecodePlan& got, const DecodePlan& want) {
  EXPECT_EQ(got.blob, want.blob);
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.stored_size, want.stored_size);
  EXPECT_EQ(got.decoded_size, want.decoded_size);
  EXPECT_TRUE(SameBytes(got.recipes, want.recipes));
  EXPECT_TRUE(SameBytes(got.parts, want.parts));
  EXPECT_TRUE(SameBytes(got.points, want.points));
  EXPECT_TRUE(SameBytes(got.windows, want.windows));
}

Result<Plans> Read(std::string_view bytes, const std::vector<uint64_t>& sizes = kBlobSizes) {
  return ReadPlanFile(bytes, kLabel, kIndexChecksum, kSource, sizes);
}

std::string Bytes(const Plans& plans) { return PlanFileBytes(plans, kIndexChecksum, kSource); }

void Put64(std::string& bytes, size_t at, uint64_t value) {
  std::memcpy(bytes.data() + at, &value, sizeof(value));
}

// Makes the header's file size and both checksums agree with `bytes`, as a writer that
// meant harm would.
void Reseal(std::string& bytes) {
  Put64(bytes, kFileSizeAt, bytes.size());
  Put64(bytes, kBodyChecksumAt,
        XXH3_64bits(bytes.data() + kHeaderSize, bytes.size() - kHeaderSize));
  Put64(bytes, kHeaderChecksumAt, 0);
  Put64(bytes, kHeaderChecksumAt, XXH3_64bits(bytes.data(), kHeaderSize));
}

// The message ReadPlanFile refuses `bytes` with, checked to name the file.
std::string RefusalOf(std::string_view bytes, int code = EINVAL,
                      const std::vector<uint64_t>& sizes = kBlobSizes) {
  auto read = Read(bytes, sizes);
  EXPECT_FALSE(read.ok());
  if (read.ok()) return "";
  EXPECT_EQ(read.error().code, code) << read.error().message;
  EXPECT_THAT(read.error().message, StartsWith(fmt::format("cannot use plan file {}: ", kLabel)));
  return read.error().message;
}

// The refusal of the sample with `change` made to its plans before they are written.
std::string RefusalOf(const std::function<void(Plans&)>& change) {
  Plans plans = Sample();
  change(plans);
  return RefusalOf(Bytes(plans));
}

// The refusal of the sample's file with `change` made to its bytes, resealed.
std::string RefusalOfBytes(const std::function<void(std::string&)>& change) {
  std::string bytes = Bytes(Sample());
  change(bytes);
  Reseal(bytes);
  return RefusalOf(bytes);
}

// Where the sample file keeps its arrays: the zip plan's first, right after the records.
constexpr size_t kZipRecipesAt = kHeaderSize + 2 * kRecordSize;

TEST(PlanFile, RoundTripsZipAndGzipPlans) {
  const Plans plans = Sample();
  auto read = Read(Bytes(plans));
  ASSERT_TRUE(read.ok()) << read.error().message;
  ASSERT_EQ(read->size(), 2u);
  ExpectSame((*read)[0], plans[0]);
  ExpectSame((*read)[1], plans[1]);
}

TEST(PlanFile, WritesPlansInBlobOrder) {
  auto read = Read(Bytes({GzipPlan(), ZipPlan()}));
  ASSERT_TRUE(read.ok()) << read.error().message;
  ASSERT_EQ(read->size(), 2u);
  ExpectSame((*read)[0], ZipPlan());
  ExpectSame((*read)[1], GzipPlan());
}

TEST(PlanFile, RoundTripsNoPlansAndAPlanWithoutRecipes) {
  auto none = Read(Bytes({}));
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->empty());
  DecodePlan empty;
  empty.blob = 1;
  empty.kind = DecodeKind::kGzip;
  empty.stored_size = 5000;
  auto read = Read(Bytes({empty}));
  ASSERT_TRUE(read.ok()) << read.error().message;
  ASSERT_EQ(read->size(), 1u);
  ExpectSame((*read)[0], empty);
}

TEST(PlanFile, WritesReservedFieldsAsZero) {
  Plans plans = Sample();
  plans[0].recipes[2].reserved[1] = 5;
  plans[0].recipes[2].reserved2 = 6;
  plans[0].parts[0].reserved = 7;
  plans[1].points[1].reserved = 8;
  auto read = Read(Bytes(plans));
  ASSERT_TRUE(read.ok()) << read.error().message;
  ExpectSame((*read)[0], ZipPlan());
  ExpectSame((*read)[1], GzipPlan());
}

TEST(DecodePlan, FindsTheRecipeHoldingAnOffset) {
  DecodePlan plan;
  EXPECT_EQ(plan.Find(0), nullptr);
  plan.recipes = {Recipe(DecodeKind::kAsStored, 100, 100, 100, 100),
                  Recipe(DecodeKind::kAsStored, 200, 100, 200, 100),
                  Recipe(DecodeKind::kAsStored, 500, 100, 500, 100)};
  const DecodeRecipe* r = plan.recipes.data();
  EXPECT_EQ(plan.Find(0), nullptr);  // before the first
  EXPECT_EQ(plan.Find(99), nullptr);
  EXPECT_EQ(plan.Find(100), &r[0]);
  EXPECT_EQ(plan.Find(199), &r[0]);
  EXPECT_EQ(plan.Find(200), &r[1]);  // where two touch
  EXPECT_EQ(plan.Find(299), &r[1]);
  EXPECT_EQ(plan.Find(300), nullptr);  // a gap
  EXPECT_EQ(plan.Find(499), nullptr);
  EXPECT_EQ(plan.Find(500), &r[2]);
  EXPECT_EQ(plan.Find(599), &r[2]);
  EXPECT_EQ(plan.Find(600), nullptr);  // after the last
  EXPECT_EQ(plan.Find(UINT64_MAX), nullptr);
}

TEST(PlanFile, RefusesWhatIsNotAPlanFile) {
  EXPECT_THAT(RefusalOf(""), HasSubstr("the file is 0 bytes, shorter than a header"));
  EXPECT_THAT(RefusalOf("GPUFSIDX, version 3, and more"), HasSubstr("not a gpufs plan file"));
  std::string bytes = Bytes(Sample());
  EXPECT_THAT(RefusalOf(std::string_view(bytes).substr(0, 40)),
              HasSubstr("the file is 40 bytes, shorter than a header"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { b[12] = 64; }),
              HasSubstr("header size 64 is wrong"));
  EXPECT_THAT(RefusalOf(bytes + "x"), HasSubstr("truncated or extended"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { Put64(b, kPlanCountAt, 1000); }),
              HasSubstr("1000 plans do not fit"));
}

TEST(PlanFile, RefusesAnotherVersionIndexOrArchiveAsStale) {
  std::string bytes = Bytes(Sample());
  bytes[8] = 2;
  Reseal(bytes);
  EXPECT_THAT(RefusalOf(bytes, kStalePlanFile),
              HasSubstr("it is plan file version 2, and this gpufsd reads version 1"));
  const std::string good = Bytes(Sample());
  auto other_index = ReadPlanFile(good, kLabel, kIndexChecksum + 1, kSource, kBlobSizes);
  ASSERT_FALSE(other_index.ok());
  EXPECT_EQ(other_index.error().code, kStalePlanFile);
  EXPECT_THAT(other_index.error().message, HasSubstr("it goes with another index"));
  SourceStamp touched = kSource;
  touched.mtime_ns += 1;
  auto other_source = ReadPlanFile(good, kLabel, kIndexChecksum, touched, kBlobSizes);
  ASSERT_FALSE(other_source.ok());
  EXPECT_EQ(other_source.error().code, kStalePlanFile);
  EXPECT_THAT(other_source.error().message, HasSubstr("it was made of the archive when"));
}

TEST(PlanFile, RefusesPlansOfNoBlobOrOfTheWrongKindOrSize) {
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].kind = DecodeKind::kAsStored; }),
              HasSubstr("plan 1 is of kind 0, neither zip (1) nor gzip (2)"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].kind = static_cast<DecodeKind>(9); }),
              HasSubstr("plan 1 is of kind 9"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { b[kHeaderSize + 6] = 1; }),
              HasSubstr("plan 0 has reserved bytes set"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].blob = 2; }),
              HasSubstr("plan 1 is for blob 2, and the index has 2 blobs"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].blob = 0; }),
              HasSubstr("plan 1 is for blob 0, after a plan for blob 0"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].stored_size = 4999; }),
              HasSubstr("plan 1 is for blob 1 of 4999 bytes, which the index says is 5000"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].points.push_back(GzipPoint{}); }),
              HasSubstr("plan 0 is a zip's, yet has gzip access points"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].parts.push_back(ZipPart{}); }),
              HasSubstr("plan 1 is a gzip stream's, yet has zip parts"));
}

TEST(PlanFile, RefusesArraysOutsideTheFile) {
  // The zip plan's record: its recipes' {offset, count} from byte 24, then its parts', its
  // points' and its windows'.
  constexpr size_t kRecipesRef = kHeaderSize + 24;
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { Put64(b, kRecipesRef, UINT64_MAX - 7); }),
              HasSubstr("the recipes of plan 0 lie outside the file"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { Put64(b, kRecipesRef, kZipRecipesAt + 4); }),
              HasSubstr("the recipes of plan 0 lie outside the file"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { Put64(b, kRecipesRef, 8); }),
              HasSubstr("the recipes of plan 0 lie outside the file"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { Put64(b, kRecipesRef + 8, UINT64_MAX / 4); }),
              HasSubstr("the recipes of plan 0 lie outside the file"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { Put64(b, kRecipesRef + 24, 1u << 20); }),
              HasSubstr("the zip parts of plan 0 lie outside the file"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { Put64(b, kRecipesRef + 40, 1u << 20); }),
              HasSubstr("the access points of plan 0 lie outside the file"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { Put64(b, kRecipesRef + 56, 1u << 30); }),
              HasSubstr("the windows of plan 0 lie outside the file"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].windows.resize(kGzipWindow + 8); }),
              HasSubstr("the windows of plan 1 are 32776 bytes, not a multiple of 32768"));
}

TEST(PlanFile, RefusesZipPartsThatCannotBeDecoded) {
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { b[kZipRecipesAt + 3 * 48 + 30] = 1; }),
              HasSubstr("part 0 of plan 0 has reserved bytes set"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].parts[1].method = 12; }),
              HasSubstr("part 1 of plan 0 has method 12, neither stored (0) nor deflated (8)"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].parts[1].stored_size = 99; }),
              HasSubstr("part 1 of plan 0 is stored, yet its 99 stored bytes make 100"));
}

TEST(PlanFile, RefusesGzipPointsThatCannotBeStartedFrom) {
  // The gzip plan's points follow its recipes, after the zip plan's arrays.
  constexpr size_t kPointsAt = kZipRecipesAt + 3 * 48 + 2 * 32 + 4 * 48;
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { b[kPointsAt + 24 + 22] = 1; }),
              HasSubstr("point 1 of plan 1 has reserved bits set"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].points[1].member = 2; }),
              HasSubstr("point 1 of plan 1 has reserved bits set"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].points[1].bits = 8; }),
              HasSubstr("point 1 of plan 1 has 8 bits to feed, over 7"));
  EXPECT_THAT(RefusalOf([](Plans& p) {
                p[1].points[0] = GzipPoint{0, 0, 0, 1, 0};
              }),
              HasSubstr("point 0 of plan 1 feeds bits of a byte before the archive's start"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].points[2].in = 5001; }),
              HasSubstr("point 2 of plan 1 lies past the archive's end"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].points[2].out = 20001; }),
              HasSubstr("point 2 of plan 1 lies past the decoded end (20000)"));
  EXPECT_THAT(RefusalOf([](Plans& p) {
                p[1].points[0].in = 10;
                p[1].points[0].bits = 2;
              }),
              HasSubstr("point 0 of plan 1 starts a gzip member, yet has bits or a window"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].points[0].window = 0; }),
              HasSubstr("point 0 of plan 1 starts a gzip member, yet has bits or a window"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].points[2].window = 2; }),
              HasSubstr("point 2 of plan 1 names window 2 of 2"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].points[2].out = 7999; }),
              HasSubstr("point 2 of plan 1 comes before point 1"));
}

TEST(PlanFile, RefusesRecipesOutOfOrderOrOutOfRange) {
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { b[kZipRecipesAt + 48 + 34] = 1; }),
              HasSubstr("recipe 1 of plan 0 has reserved bytes set"));
  EXPECT_THAT(RefusalOfBytes([](std::string& b) { b[kZipRecipesAt + 48 + 45] = 1; }),
              HasSubstr("recipe 1 of plan 0 has reserved bytes set"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[3].size = 0; }),
              HasSubstr("recipe 3 of plan 1 makes 0 bytes, where a recipe makes 1 byte to 1 GiB"));
  EXPECT_THAT(RefusalOf([](Plans& p) {
                p[1].decoded_size = 1ull << 40;
                p[1].recipes[3].size = kMaxRecipeSize + 1;
              }),
              HasSubstr("recipe 3 of plan 1 makes 1073741825 bytes"));
  EXPECT_THAT(
      RefusalOf([](Plans& p) { p[1].recipes[2].offset = 12999; }),
      HasSubstr("recipe 2 of plan 1 starts at 12999, before the one before it ends (13000)"));
  EXPECT_THAT(RefusalOf([](Plans& p) { std::swap(p[0].recipes[0], p[0].recipes[1]); }),
              HasSubstr("recipe 1 of plan 0 starts at 0, before the one before it ends (500)"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[3].size = 5001; }),
              HasSubstr("recipe 3 of plan 1 ends past the decoded end (20000)"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[3].offset = UINT64_MAX - 10; }),
              HasSubstr("recipe 3 of plan 1 ends past the decoded end"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[3].stored_size = 1501; }),
              HasSubstr("recipe 3 of plan 1 reads past the archive's end"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[3].stored_offset = UINT64_MAX; }),
              HasSubstr("recipe 3 of plan 1 reads past the archive's end"));
}

TEST(PlanFile, RefusesRecipesOfTheWrongKind) {
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[0].kind = DecodeKind::kAsStored; }),
              HasSubstr("recipe 0 of plan 1 serves bytes as stored in a gzip stream"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].recipes[1].stored_offset = 301; }),
              HasSubstr("recipe 1 of plan 0 serves bytes as stored, yet moves or resizes them"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].recipes[1].stored_size = 199; }),
              HasSubstr("recipe 1 of plan 0 serves bytes as stored, yet moves or resizes them"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[0].kind = DecodeKind::kZip; }),
              HasSubstr("recipe 0 of plan 1 is a zip recipe in a gzip plan"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].recipes[2].kind = DecodeKind::kGzip; }),
              HasSubstr("recipe 2 of plan 0 is a gzip recipe in a zip plan"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].recipes[2].kind = static_cast<DecodeKind>(3); }),
              HasSubstr("recipe 2 of plan 0 is of kind 3, which is none"));
}

TEST(PlanFile, RefusesZipRecipesWhosePartsDoNotFit) {
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].recipes[2].count = 0; }),
              HasSubstr("recipe 2 of plan 0 names parts 0 to 0 of 2"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].recipes[2].first = 1; }),
              HasSubstr("recipe 2 of plan 0 names parts 1 to 3 of 2"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].recipes[2].first = UINT32_MAX; }),
              HasSubstr("recipe 2 of plan 0 names parts 4294967295 to 4294967297 of 2"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].recipes[2].size = 249; }),
              HasSubstr("recipe 2 of plan 0 has parts past its size"));
  EXPECT_THAT(RefusalOf([](Plans& p) {
                p[0].recipes[2].size = 251;
                p[0].decoded_size = 1251;
              }),
              HasSubstr("recipe 2 of plan 0 makes 251 bytes, and its parts 250"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].parts[0].data_offset = 99; }),
              HasSubstr("part 0 of recipe 2 of plan 0 lies outside the recipe's stored range"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].parts[1].data_offset = 201; }),
              HasSubstr("part 1 of recipe 2 of plan 0 lies outside the recipe's stored range"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[0].parts[0].data_offset = UINT64_MAX; }),
              HasSubstr("part 0 of recipe 2 of plan 0 lies outside the recipe's stored range"));
}

TEST(PlanFile, RefusesGzipRecipesThatDoNotStartAtTheirPoint) {
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[1].count = 1; }),
              HasSubstr("recipe 1 of plan 1 is a gzip recipe with parts"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[1].first = 3; }),
              HasSubstr("recipe 1 of plan 1 starts from point 3 of 3"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[1].first = 2; }),
              HasSubstr("recipe 1 of plan 1 starts at 8000, before its point 2 (15000)"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[1].stored_offset = 2000; }),
              HasSubstr("recipe 1 of plan 1 reads from 2000, and its point 1 from 1999"));
  EXPECT_THAT(RefusalOf([](Plans& p) { p[1].recipes[3].stored_offset = 3499; }),
              HasSubstr("recipe 3 of plan 1 reads from 3499, and its point 2 from 3500"));
}

TEST(PlanFile, RefusesATruncatedFileAtEveryLength) {
  const std::string bytes = Bytes(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string cut = bytes.substr(0, n);
    ASSERT_FALSE(Read(cut).ok()) << n;
    if (n < kHeaderSize) continue;
    Reseal(cut);  // past the checksums, to the records and arrays
    ASSERT_FALSE(Read(cut).ok()) << n;
  }
}

TEST(PlanFile, RefusesFlippedBytesByTheirChecksums) {
  const std::string bytes = Bytes(Sample());
  // Every byte of the header, records and small arrays; then a sample of the windows.
  constexpr size_t kWindowsAt = kZipRecipesAt + 3 * 48 + 2 * 32 + 4 * 48 + 3 * 24;
  for (size_t at = 0; at < bytes.size(); at += at < kWindowsAt ? 1 : 61) {
    std::string flipped = bytes;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    auto read = Read(flipped);
    ASSERT_FALSE(read.ok()) << at;
    if (at < 12) continue;  // the magic and version are looked at before any checksum
    EXPECT_THAT(read.error().message, HasSubstr("checksum")) << at;
  }
}

}  // namespace
}  // namespace gpufs
