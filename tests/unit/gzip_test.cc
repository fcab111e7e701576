#include "dataset/compressed/gzip.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSpan = 64 << 10;

// An archive held in memory.
class MemReader : public RangeReader {
 public:
  explicit MemReader(std::string bytes, std::string label = "data.tar.gz")
      : bytes_(std::move(bytes)), label_(std::move(label)) {}
  uint64_t size() const override { return bytes_.size(); }
  const std::string& label() const override { return label_; }
  Result<size_t> ReadAt(uint64_t offset, size_t length, char* out) override {
    if (offset >= bytes_.size()) return size_t{0};
    const size_t n = std::min<uint64_t>(length, bytes_.size() - offset);
    std::memcpy(out, bytes_.data() + offset, n);
    read_ += n;
    return n;
  }
  uint64_t read() const { return read_; }

 private:
  uint64_t read_ = 0;
  std::string bytes_;
  std::string label_;
};

// Pseudo-random but compressible: random runs (as JPEG data is), text, and copies of
// recent bytes, so that back-references cross access points.
std::string MakeData(size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  static const char* const kWords[] = {"tench ", "goldfish ", "shark ", "n01440764/", ".JPEG\n"};
  std::string data;
  while (data.size() < size) {
    switch (rng() % 3) {
      case 0:
        for (size_t n = 1 + rng() % 4096; n > 0; --n) data += static_cast<char>(rng());
        break;
      case 1:
        for (size_t n = 1 + rng() % 500; n > 0; --n) data += kWords[rng() % 5];
        break;
      default:
        if (data.size() > 1000) {
          const size_t back = 1 + rng() % std::min<size_t>(data.size(), 32000);
          const size_t from = data.size() - back;
          for (size_t i = 0, n = 3 + rng() % 3000; i < n; ++i) data += data[from + i];
        }
    }
  }
  data.resize(size);
  return data;
}

struct MemberOptions {
  int level = 6;
  size_t full_flush_every = 0;  // 0: none
  bool header_fields = false;   // FEXTRA, FNAME, FCOMMENT and FHCRC
};

// One gzip member of `data`, made by zlib.
std::string Gzip(std::string_view data, MemberOptions options = {}) {
  z_stream s{};
  EXPECT_EQ(deflateInit2(&s, options.level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
  gz_header header{};
  std::string extra = "AB\x04\x00xyzw", name = "n01440764.tar", comment = "train";
  if (options.header_fields) {
    header.extra = reinterpret_cast<Bytef*>(extra.data());
    header.extra_len = extra.size();
    header.name = reinterpret_cast<Bytef*>(name.data());
    header.comment = reinterpret_cast<Bytef*>(comment.data());
    header.hcrc = 1;
    EXPECT_EQ(deflateSetHeader(&s, &header), Z_OK);
  }
  std::string out(deflateBound(&s, data.size()) + data.size() / 100 + 1024, '\0');
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = out.size();
  const size_t piece = options.full_flush_every ? options.full_flush_every : data.size();
  for (size_t at = 0;; at += piece) {
    const size_t n = std::min(piece, data.size() - std::min(at, data.size()));
    s.next_in =
        reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + std::min(at, data.size())));
    s.avail_in = n;
    const bool last = at + n >= data.size();
    const int ret = deflate(&s, last ? Z_FINISH : Z_FULL_FLUSH);
    EXPECT_TRUE(ret == (last ? Z_STREAM_END : Z_OK)) << ret;
    if (last) break;
  }
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

// Members of `sizes` bytes each, back to back, as pigz or `cat a.gz b.gz` make them.
std::string Members(std::string_view data, const std::vector<size_t>& sizes) {
  std::string out;
  size_t at = 0;
  for (size_t size : sizes) {
    out += Gzip(data.substr(at, size));
    at += size;
  }
  return out;
}

std::string ReadAll(RangeReader& reader, size_t chunk) {
  std::string out;
  std::vector<char> buffer(chunk);
  for (uint64_t at = 0;; at += chunk) {
    auto n = reader.ReadAt(at, chunk, buffer.data());
    EXPECT_TRUE(n) << n.error().message;
    if (!n || *n == 0) break;
    out.append(buffer.data(), *n);
  }
  return out;
}

// A plan as an index would hold it, from a reader that read the stream to its end.
DecodePlan PlanOf(GzipReader& reader, uint64_t stored_size) {
  DecodePlan plan;
  plan.kind = DecodeKind::kGzip;
  plan.stored_size = stored_size;
  plan.decoded_size = reader.decoded_size();
  plan.points = reader.points();
  plan.windows = reader.TakeWindows();
  return plan;
}

// The recipe of the decoded range [offset, offset + size), from the last point before it.
DecodeRecipe RecipeFor(const DecodePlan& plan, const GzipReader& reader, uint64_t offset,
                       uint64_t size) {
  auto after = std::upper_bound(plan.points.begin(), plan.points.end(), offset,
                                [](uint64_t o, const GzipPoint& p) { return o < p.out; });
  const GzipPoint& p = *std::prev(after);
  DecodeRecipe r{.offset = offset, .size = size, .kind = DecodeKind::kGzip};
  r.first = static_cast<uint32_t>(std::prev(after) - plan.points.begin());
  r.stored_offset = p.in - (p.bits ? 1 : 0);
  r.stored_size = reader.StoredEnd(offset + size) - r.stored_offset;
  return r;
}

Result<std::string> Decode(const DecodePlan& plan, const DecodeRecipe& r, std::string_view gz,
                           const MemberNamer& name_of = {}) {
  std::string out(r.size, '\0');
  Status s = DecodeGzipRecipe(plan, r, gz.substr(r.stored_offset, r.stored_size), out,
                              "data.tar.gz", name_of);
  if (!s) return s.error();
  return out;
}

// Reads `gz` through a GzipReader forward, with skips and backward, then decodes ranges
// from every point to `pairs` later ones and at random: all must give `data`'s bytes.
void CheckStream(const std::string& gz, const std::string& data, uint64_t span, size_t pairs) {
  MemReader compressed(gz);
  GzipReader reader(compressed, span);
  EXPECT_EQ(reader.size(), kUnknownSize);
  ASSERT_EQ(ReadAll(reader, 4 << 20), data);
  EXPECT_EQ(reader.size(), data.size());
  std::mt19937_64 rng(7);
  for (int i = 0; i < 60; ++i) {
    const uint64_t at = rng() % (data.size() + 10);
    const size_t length = rng() % 300000;
    std::string got(length, '\0');
    auto n = reader.ReadAt(at, length, got.data());
    ASSERT_TRUE(n) << n.error().message;
    got.resize(*n);
    ASSERT_EQ(got, data.substr(std::min<uint64_t>(at, data.size()), length)) << at;
  }
  ASSERT_TRUE(reader.Finish());
  EXPECT_EQ(reader.decoded_size(), data.size());
  EXPECT_EQ(reader.compressed_read(), gz.size());
  const DecodePlan plan = PlanOf(reader, gz.size());
  const std::vector<GzipPoint>& ps = plan.points;
  ASSERT_FALSE(ps.empty());
  EXPECT_TRUE(ps[0].out == 0 && ps[0].in == 0 && ps[0].member);
  EXPECT_GT(ps.size(), data.size() / span / 2);
  auto end_of = [&](size_t i) { return i + 1 < ps.size() ? ps[i + 1].out : data.size(); };
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(i == 0 || ps[i].out > ps[i - 1].out);
    // A group from one point to the next reads no byte past the next.
    EXPECT_LE(reader.StoredEnd(ps[i].out), ps[i].in);
    auto whole = Decode(plan, RecipeFor(plan, reader, ps[i].out, end_of(i) - ps[i].out), gz);
    ASSERT_TRUE(whole) << whole.error().message;
    ASSERT_EQ(*whole, data.substr(ps[i].out, end_of(i) - ps[i].out)) << i;
    for (size_t j = i; j < std::min(ps.size(), i + pairs); ++j) {
      const uint64_t offset = ps[i].out + rng() % (end_of(i) - ps[i].out);
      const uint64_t end = std::max(offset + 1, ps[j].out + rng() % (end_of(j) - ps[j].out + 1));
      const DecodeRecipe r = RecipeFor(plan, reader, offset, end - offset);
      auto got = Decode(plan, r, gz);
      ASSERT_TRUE(got) << got.error().message;
      ASSERT_EQ(*got, data.substr(offset, end - offset)) << i << " " << j;
    }
  }
}

TEST(Gzip, OneMemberIsReadForwardWithSkipsAndBackwardAndDecodedFromEveryPoint) {
  const std::string data = MakeData(3 << 20, 1);
  CheckStream(Gzip(data), data, kSpan, 4);
}

TEST(Gzip, EveryPairOfPointsDecodesTheBytesBetweenThem) {
  const std::string data = MakeData(1 << 20, 2);
  CheckStream(Gzip(data), data, 32 << 10, 1000);
}

TEST(Gzip, MembersBackToBackAreReadAcrossTheirBoundaries) {
  const std::string data = MakeData(2 << 20, 3);
  const std::string gz =
      Members(data, {100000, 0, 1, 300000, 40000, 40000, 40000, 1 << 20, 577151});
  CheckStream(gz, data, kSpan, 4);
}

TEST(Gzip, MemberStartsArePreferredToBlockBoundaries) {
  const std::string data = MakeData(2 << 20, 4);
  std::vector<size_t> sizes(32, 64 << 10);
  const std::string gz = Members(data, sizes);
  MemReader compressed(gz);
  GzipReader reader(compressed, kSpan);
  ASSERT_TRUE(reader.Finish());
  ASSERT_EQ(reader.points().size(), 32u);
  for (const GzipPoint& p : reader.points()) EXPECT_TRUE(p.member && p.window == kNoWindow);
  EXPECT_TRUE(reader.TakeWindows().empty());
  CheckStream(gz, data, kSpan, 3);
}

TEST(Gzip, HeaderFieldsAndFullFlushesAreRead) {
  const std::string data = MakeData(1 << 20, 5);
  const MemberOptions fields{.header_fields = true};
  std::string gz = Gzip(std::string_view(data).substr(0, 500000), fields);
  gz += Gzip(std::string_view(data).substr(500000), {.level = 9, .full_flush_every = 50000});
  CheckStream(gz, data, kSpan, 4);
}

TEST(Gzip, ZerosAfterTheLastMemberAreIgnored) {
  const std::string data = MakeData(300000, 6);
  CheckStream(Gzip(data) + std::string(4096, '\0'), data, kSpan, 2);
}

// A block boundary mid-byte leaves bits of the byte before the point to be primed; most
// boundaries are such. Every one found must decode its range and the bytes after it.
TEST(Gzip, APointInsideAByteDecodesFromItsBits) {
  const std::string data = MakeData(2 << 20, 16);
  const std::string gz = Gzip(data);
  MemReader compressed(gz);
  GzipReader reader(compressed, 32 << 10);
  ASSERT_TRUE(reader.Finish());
  const DecodePlan plan = PlanOf(reader, gz.size());
  int primed = 0;
  for (size_t i = 0; i < plan.points.size(); ++i) {
    const GzipPoint& p = plan.points[i];
    if (p.bits == 0) continue;
    ++primed;
    const uint64_t size = std::min<uint64_t>(100000, data.size() - p.out);
    auto got = Decode(plan, RecipeFor(plan, reader, p.out, size), gz);
    ASSERT_TRUE(got) << got.error().message;
    ASSERT_EQ(*got, data.substr(p.out, size)) << i << " bits " << p.bits;
  }
  EXPECT_GT(primed, 0);
}

// From a block boundary, the rest of the member is inflated raw: its trailer is skipped, and
// the members after it (one of them empty) are read from their headers.
TEST(Gzip, ARangeFromAWindowPointCrossesMemberBoundaries) {
  const std::string data = MakeData(1 << 20, 17);
  const std::string gz = Members(data, {400000, 0, 100000, 548576});
  MemReader compressed(gz);
  GzipReader reader(compressed, kSpan);
  ASSERT_TRUE(reader.Finish());
  const DecodePlan plan = PlanOf(reader, gz.size());
  int crossed = 0;
  for (size_t i = 0; i < plan.points.size(); ++i) {
    const GzipPoint& p = plan.points[i];
    if (p.member || p.out >= 400000) continue;
    ++crossed;
    for (uint64_t end : {uint64_t{400001}, uint64_t{500000}, uint64_t{600000}, data.size()}) {
      auto got = Decode(plan, RecipeFor(plan, reader, p.out, end - p.out), gz);
      ASSERT_TRUE(got) << got.error().message;
      ASSERT_EQ(*got, data.substr(p.out, end - p.out)) << i << " to " << end;
    }
  }
  EXPECT_GT(crossed, 0);
}

TEST(Gzip, ReadsComeFromTwoThreadsInTurn) {
  const std::string data = MakeData(2 << 20, 7);
  MemReader compressed(Gzip(data));
  GzipReader reader(compressed, kSpan);
  std::string got(data.size(), '\0');
  for (size_t at = 0; at < data.size(); at += 2 * 65536) {
    auto n = std::async(std::launch::async, [&] { return reader.ReadAt(at, 65536, &got[at]); });
    ASSERT_TRUE(n.get());
    ASSERT_TRUE(reader.ReadAt(at + 65536, 65536, &got[at + 65536]));
  }
  EXPECT_EQ(got, data);
}

// A tar of tars is walked twice: its outer archive, then each inner one from the start.
TEST(Gzip, ASecondWalkReplaysTheStreamOnce) {
  const std::string data = MakeData(6 << 20, 13);
  MemReader compressed(Gzip(data));
  GzipReader reader(compressed, kSpan);
  char block[512];
  ASSERT_TRUE(reader.ReadAt(0, sizeof(block), block));
  ASSERT_EQ(ReadAll(reader, 4 << 20), data);
  const uint64_t first = compressed.read();
  EXPECT_LT(first, compressed.size() + (1 << 20));
  ASSERT_EQ(ReadAll(reader, 1 << 20), data);
  EXPECT_LT(compressed.read() - first, compressed.size() + (8 << 20));
}

TEST(Gzip, WindowsTakenEarlyLeaveOnlyMemberStartsToReplayFrom) {
  const std::string data = MakeData(2 << 20, 14);
  MemReader compressed(Members(data, {1 << 20, 1 << 20}));
  GzipReader reader(compressed, kSpan);
  std::string got(600000, '\0');
  ASSERT_TRUE(reader.ReadAt(0, got.size(), got.data()));
  const std::vector<char> windows = reader.TakeWindows();
  EXPECT_FALSE(windows.empty());
  ASSERT_TRUE(reader.Finish());
  for (const GzipPoint& p : reader.points()) {
    EXPECT_TRUE(p.member || (p.window + 1) * kGzipWindow <= windows.size()) << p.out;
  }
  EXPECT_EQ(ReadAll(reader, 3 << 20), data);
}

TEST(Gzip, LooksLikeGzipReadsTheMagic) {
  MemReader gz(Gzip("x")), text("hello"), empty("");
  EXPECT_TRUE(LooksLikeGzip(gz));
  EXPECT_FALSE(LooksLikeGzip(text));
  EXPECT_FALSE(LooksLikeGzip(empty));
}

// `gz` as the first pass finds it: an error, or none.
Status FirstPass(std::string gz) {
  MemReader compressed(std::move(gz));
  GzipReader reader(compressed, kSpan);
  return reader.Finish();
}

TEST(Gzip, TheFirstPassRefusesWhatIsNotAWholeGzipStream) {
  const std::string data = MakeData(500000, 8);
  const std::string gz = Gzip(data);
  for (size_t cut : {size_t{2}, size_t{10}, gz.size() / 2, gz.size() - 5, gz.size() - 1}) {
    Status s = FirstPass(gz.substr(0, cut));
    ASSERT_FALSE(s) << cut;
    EXPECT_THAT(s.error().message, HasSubstr("data.tar.gz")) << cut;
  }
  EXPECT_THAT(FirstPass(gz.substr(0, gz.size() - 3)).error().message, HasSubstr("ends"));
  std::string damaged = gz;
  for (size_t i = 1000; i < 1100; ++i) damaged[i] = static_cast<char>(~damaged[i]);
  EXPECT_FALSE(FirstPass(damaged));
  std::string crc = gz;
  crc[gz.size() - 8] ^= 1;
  EXPECT_THAT(FirstPass(crc).error().message, HasSubstr("CRC-32"));
  std::string isize = gz;
  isize[gz.size() - 2] ^= 1;
  EXPECT_THAT(FirstPass(isize).error().message, HasSubstr("ISIZE"));
  EXPECT_THAT(FirstPass(gz + "garbage").error().message, HasSubstr("trailing garbage"));
  EXPECT_THAT(FirstPass(gz + std::string(10, '\0') + "x").error().message,
              HasSubstr("trailing garbage"));
  EXPECT_THAT(FirstPass("plain text, not gzip").error().message, HasSubstr("not a gzip stream"));
  EXPECT_THAT(FirstPass("").error().message, HasSubstr("not a gzip stream"));
}

// An archive whose reads past `bad` fail, as a remote one's may.
class FailingReader : public MemReader {
 public:
  FailingReader(std::string bytes, uint64_t bad) : MemReader(std::move(bytes)), bad_(bad) {}
  Result<size_t> ReadAt(uint64_t offset, size_t length, char* out) override {
    if (offset + length > bad_) return Fail(EIO, "cannot read {}: connection reset", label());
    return MemReader::ReadAt(offset, length, out);
  }

 private:
  uint64_t bad_;
};

TEST(Gzip, AReadErrorOfTheArchiveIsPassedOn) {
  std::mt19937 rng(15);
  std::string noise(6 << 20, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  const std::string gz = Gzip(noise);  // more than one 4 MiB piece: the second read fails
  FailingReader compressed(gz, gz.size() - 1);
  GzipReader reader(compressed, kSpan);
  Status s = reader.Finish();
  ASSERT_FALSE(s);
  EXPECT_THAT(s.error().message, HasSubstr("connection reset"));
}

TEST(Gzip, AFailedFirstPassFailsEveryLaterRead) {
  std::string gz = Gzip(MakeData(500000, 9));
  gz[gz.size() - 8] ^= 1;
  MemReader compressed(gz);
  GzipReader reader(compressed, kSpan);
  EXPECT_FALSE(reader.Finish());
  char byte;
  EXPECT_FALSE(reader.ReadAt(0, 1, &byte));
}

struct Indexed {
  std::string data;
  std::string gz;
  DecodePlan plan;
  DecodeRecipe recipe;  // of a range well past the second point
};

Indexed IndexOne() {
  Indexed x;
  x.data = MakeData(1 << 20, 10);
  x.gz = Gzip(x.data);
  MemReader compressed(x.gz);
  GzipReader reader(compressed, kSpan);
  EXPECT_TRUE(reader.Finish());
  x.plan = PlanOf(reader, x.gz.size());
  x.recipe = RecipeFor(x.plan, reader, x.plan.points[2].out + 1000, 200000);
  EXPECT_FALSE(x.plan.points[x.recipe.first].member);
  return x;
}

TEST(Gzip, DecodingRefusesAPlanThatDoesNotHoldTheRecipesPoint) {
  Indexed x = IndexOne();
  ASSERT_TRUE(Decode(x.plan, x.recipe, x.gz));
  DecodeRecipe r = x.recipe;
  r.first = static_cast<uint32_t>(x.plan.points.size());
  EXPECT_THAT(Decode(x.plan, r, x.gz).error().message, HasSubstr("access point"));
  DecodePlan plan = x.plan;
  plan.points[x.recipe.first].window = static_cast<uint32_t>(plan.windows.size() / kGzipWindow);
  EXPECT_THAT(Decode(plan, x.recipe, x.gz).error().message, HasSubstr("window"));
  plan.points[x.recipe.first].window = kNoWindow;
  EXPECT_FALSE(Decode(plan, x.recipe, x.gz));
  plan = x.plan;
  plan.windows.resize(plan.windows.size() - 1);
  if (x.plan.points[x.recipe.first].window + 1 == x.plan.windows.size() / kGzipWindow) {
    EXPECT_FALSE(Decode(plan, x.recipe, x.gz));
  }
  r = x.recipe;
  r.stored_offset += 1;
  EXPECT_THAT(Decode(x.plan, r, x.gz).error().message, HasSubstr("start"));
  r = x.recipe;
  r.offset = x.plan.points[r.first].out - 1;
  EXPECT_FALSE(Decode(x.plan, r, x.gz));
}

TEST(Gzip, DecodingRefusesStoredBytesThatEndTooEarlyNamingTheMember) {
  Indexed x = IndexOne();
  DecodeRecipe r = x.recipe;
  r.stored_size /= 2;
  const MemberNamer name_of = [](uint64_t) { return std::string("n01440764/a.JPEG"); };
  auto got = Decode(x.plan, r, x.gz, name_of);
  ASSERT_FALSE(got);
  EXPECT_THAT(got.error().message, HasSubstr("bytes early"));
  EXPECT_THAT(got.error().message, HasSubstr("n01440764/a.JPEG"));
  EXPECT_THAT(got.error().message, HasSubstr("data.tar.gz"));
  // A range past the stream's end, with every byte after the point given.
  r = x.recipe;
  r.size = x.data.size() - r.offset + 10;
  r.stored_size = x.gz.size() - r.stored_offset;
  EXPECT_THAT(Decode(x.plan, r, x.gz).error().message, HasSubstr("10 bytes early"));
  // Stored bytes that end before the skipped output does.
  r = x.recipe;
  r.stored_size = 100;
  EXPECT_THAT(Decode(x.plan, r, x.gz).error().message, HasSubstr("bytes early"));
}

TEST(Gzip, DecodingRefusesDamagedBytes) {
  Indexed x = IndexOne();
  std::string damaged = x.gz;
  const uint64_t at = x.recipe.stored_offset + x.recipe.stored_size / 2;
  for (uint64_t i = at; i < at + 64; ++i) damaged[i] = static_cast<char>(damaged[i] ^ 0x5a);
  auto got = Decode(x.plan, x.recipe, damaged);
  // A few changed bytes may still inflate, to other bytes: never the original ones.
  if (got) {
    EXPECT_NE(*got, x.data.substr(x.recipe.offset, x.recipe.size));
  } else {
    EXPECT_THAT(got.error().message, HasSubstr("data.tar.gz"));
  }
}

// `data` compressed by `command` (reading `in`, writing `out`), or "" when the tool is
// missing.
std::string ByTool(const std::string& data, const std::string& command) {
  TempDir dir;
  const auto in = dir.path() / "in", out = dir.path() / "out";
  std::ofstream(in, std::ios::binary) << data;
  const std::string line = command + " < " + in.string() + " > " + out.string() + " 2>/dev/null";
  if (std::system(line.c_str()) != 0) return "";
  std::stringstream bytes;
  bytes << std::ifstream(out, std::ios::binary).rdbuf();
  return bytes.str();
}

void CheckTool(const std::string& tool, const std::string& command) {
  if (std::system(("command -v " + tool + " > /dev/null").c_str()) != 0) {
    GTEST_SKIP() << tool << " is not installed";
  }
  const std::string data = MakeData(4 << 20, 11);
  const std::string gz = ByTool(data, command);
  ASSERT_FALSE(gz.empty()) << command << " failed";
  CheckStream(gz, data, kSpan, 3);
}

TEST(Gzip, GzipsOutputIsRead) { CheckTool("gzip", "gzip -c -6"); }
TEST(Gzip, PigzsMembersAreRead) { CheckTool("pigz", "pigz -c -p 2 -b 128 --independent"); }
TEST(Gzip, BgzipsBlocksAreRead) { CheckTool("bgzip", "bgzip -c"); }
TEST(Gzip, CatOfGzipsIsRead) {
  const std::string data = MakeData(1 << 20, 12);
  const std::string a = ByTool(data.substr(0, 300000), "gzip -c");
  const std::string b = ByTool(data.substr(300000), "gzip -c -1");
  if (a.empty() || b.empty()) GTEST_SKIP() << "gzip is not installed";
  CheckStream(a + b, data, kSpan, 3);
}

}  // namespace
}  // namespace gpufs
