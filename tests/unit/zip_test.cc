#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libdeflate.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "dataset/compressed/zip.h"
#include "tests/unit/deflate_bytes.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

struct Member {
  std::string name;
  std::string data;
  uint16_t method = 8;      // 0 stored, 8 deflated, else written as is over stored data
  bool zip64 = false;       // sizes and offset in zip64 extra fields
  bool descriptor = false;  // sizes after the data (flag bit 3), zero in the local header
  uint32_t mode = 0100644;  // Unix mode; 0: made on MS-DOS
  uint16_t flags = 0;
  std::string local_extra;  // the local header's own extra field, besides zip64's
};

struct Written {
  std::string bytes;
  std::vector<uint64_t> local;    // each member's local header offset
  std::vector<uint64_t> central;  // each member's central entry offset
  std::vector<uint64_t> data;     // each member's data offset
  uint64_t end = 0;               // of the end-of-central-directory record
};

void Put16(std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); }
void Put32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
void Put64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void Set16(std::string& s, uint64_t at, uint16_t v) { std::memcpy(&s[at], &v, 2); }
void Set32(std::string& s, uint64_t at, uint32_t v) { std::memcpy(&s[at], &v, 4); }

void PutLocal(Written& w, const Member& m, const std::string& stored) {
  std::string& s = w.bytes;
  const bool sized = !m.descriptor;
  w.local.push_back(s.size());
  Put32(s, 0x04034b50);
  Put16(s, m.zip64 ? 45 : 20);
  Put16(s, m.flags | (m.descriptor ? 8 : 0));
  Put16(s, m.method);
  Put32(s, 0x00210000);  // 1980-01-01 00:00
  Put32(s, sized ? Crc(m.data) : 0);
  Put32(s, !sized ? 0 : m.zip64 ? 0xFFFFFFFF : stored.size());
  Put32(s, !sized ? 0 : m.zip64 ? 0xFFFFFFFF : m.data.size());
  Put16(s, m.name.size());
  Put16(s, (m.zip64 ? 20 : 0) + m.local_extra.size());
  s += m.name;
  if (m.zip64) {
    Put16(s, 1);
    Put16(s, 16);
    Put64(s, sized ? m.data.size() : 0);
    Put64(s, sized ? stored.size() : 0);
  }
  s += m.local_extra;
  w.data.push_back(s.size());
  s += stored;
  if (m.descriptor) {
    Put32(s, 0x08074b50);
    Put32(s, Crc(m.data));
    if (m.zip64) {
      Put64(s, stored.size());
      Put64(s, m.data.size());
    } else {
      Put32(s, stored.size());
      Put32(s, m.data.size());
    }
  }
}

void PutCentral(Written& w, const Member& m, uint64_t stored_size, uint64_t local) {
  std::string& s = w.bytes;
  w.central.push_back(s.size());
  Put32(s, 0x02014b50);
  Put16(s, (m.mode ? 3 << 8 : 0) | 20);
  Put16(s, m.zip64 ? 45 : 20);
  Put16(s, m.flags | (m.descriptor ? 8 : 0));
  Put16(s, m.method);
  Put32(s, 0x00210000);
  Put32(s, Crc(m.data));
  Put32(s, m.zip64 ? 0xFFFFFFFF : stored_size);
  Put32(s, m.zip64 ? 0xFFFFFFFF : m.data.size());
  Put16(s, m.name.size());
  Put16(s, m.zip64 ? 28 : 0);
  Put16(s, 0);  // comment
  Put16(s, 0);  // disk
  Put16(s, 0);  // internal attributes
  Put32(s, m.mode << 16);
  Put32(s, m.zip64 ? 0xFFFFFFFF : local);
  s += m.name;
  if (m.zip64) {
    Put16(s, 1);
    Put16(s, 24);
    Put64(s, m.data.size());
    Put64(s, stored_size);
    Put64(s, local);
  }
}

struct End {
  bool zip64 = false;
  std::string comment;
};

void PutEnd(Written& w, size_t count, uint64_t cd_offset, const End& end) {
  std::string& s = w.bytes;
  const uint64_t cd_size = s.size() - cd_offset;
  if (end.zip64) {
    const uint64_t record = s.size();
    Put32(s, 0x06064b50);
    Put64(s, 44);
    Put16(s, 45);
    Put16(s, 45);
    Put32(s, 0);
    Put32(s, 0);
    Put64(s, count);
    Put64(s, count);
    Put64(s, cd_size);
    Put64(s, cd_offset);
    Put32(s, 0x07064b50);
    Put32(s, 0);
    Put64(s, record);
    Put32(s, 1);
  }
  w.end = s.size();
  Put32(s, 0x06054b50);
  Put16(s, 0);
  Put16(s, 0);
  Put16(s, end.zip64 ? 0xFFFF : count);
  Put16(s, end.zip64 ? 0xFFFF : count);
  Put32(s, end.zip64 ? 0xFFFFFFFF : cd_size);
  Put32(s, end.zip64 ? 0xFFFFFFFF : cd_offset);
  Put16(s, end.comment.size());
  s += end.comment;
}

Written MakeZip(const std::vector<Member>& members, const End& end = {}) {
  Written w;
  std::vector<std::string> stored;
  for (const Member& m : members) {
    stored.push_back(m.method == 8 ? Deflate(m.data) : m.data);
    PutLocal(w, m, stored.back());
  }
  const uint64_t cd_offset = w.bytes.size();
  for (size_t i = 0; i < members.size(); ++i) {
    PutCentral(w, members[i], stored[i].size(), w.local[i]);
  }
  PutEnd(w, members.size(), cd_offset, end);
  return w;
}

class ZipTest : public ::testing::Test {
 protected:
  std::filesystem::path Write(const std::string& bytes, const std::string& name = "a.zip") {
    const std::filesystem::path path = dir_.path() / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  Result<ZipListing> List(const std::string& bytes, Progress* progress = nullptr) {
    auto reader = OpenFileReader(Write(bytes));
    if (!reader) return reader.error();
    return ListZip(**reader, progress);
  }

  std::string Refusal(const std::string& bytes) {
    auto listing = List(bytes);
    EXPECT_FALSE(listing.ok());
    return listing ? "" : listing.error().message;
  }

  TempDir dir_;
};

// One recipe over all of a listing's members, as the catalog builder would make for a run.
DecodePlan PlanOf(const ZipListing& listing, uint64_t archive_size) {
  DecodePlan plan;
  plan.kind = DecodeKind::kZip;
  plan.stored_size = archive_size;
  plan.parts = listing.parts;
  DecodeRecipe r;
  r.kind = DecodeKind::kZip;
  r.count = static_cast<uint32_t>(plan.parts.size());
  if (!plan.parts.empty()) {
    r.stored_offset = plan.parts.front().data_offset;
    r.stored_size = plan.parts.back().data_offset + plan.parts.back().stored_size - r.stored_offset;
  }
  for (const ZipPart& p : plan.parts) r.size += p.size;
  plan.decoded_size = r.size;
  plan.recipes.push_back(r);
  return plan;
}

Result<std::string> Decode(const DecodePlan& plan, const std::string& archive,
                           const MemberNamer& name_of = {}) {
  const DecodeRecipe& r = plan.recipes.at(0);
  std::string out(r.size, '\0');
  Status s = DecodeZipRecipe(plan, r, std::span(archive).subspan(r.stored_offset, r.stored_size),
                             out, "a.zip", name_of);
  if (!s) return s.error();
  return out;
}

std::string Joined(const ZipListing& listing, const std::map<std::string, std::string>& data) {
  std::string all;
  for (const TarEntry& e : listing.files.entries) all += data.at(std::string(e.path));
  return all;
}

TEST_F(ZipTest, StoredAndDeflatedMembersAreListedAtTheirDataAndDecoded) {
  const std::string text(5000, 'x');
  std::vector<Member> members = {
      {"cat/a.jpg", "stored bytes", 0},
      {"./dog//b.jpg", text + "tail", 8, false, false, 0100644, 0,
       std::string("\x99\x99\2\0ab", 6)},
      {"dog/", "", 0},
      {"empty.txt", "", 8},
      {"/c.bin", std::string(100, '\0') + "z", 8, false, false, 0},
  };
  const Written w = MakeZip(members, {.comment = "PK\x05\x06 a comment that looks like a record"});
  auto listing = List(w.bytes);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  const std::vector<TarEntry>& e = listing->files.entries;
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].path, "cat/a.jpg");
  EXPECT_EQ(e[1].path, "dog/b.jpg");
  EXPECT_EQ(e[2].path, "empty.txt");
  EXPECT_EQ(e[3].path, "c.bin");
  const size_t data_of[] = {0, 1, 3, 4};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(e[i].offset, w.data[data_of[i]]) << i;
    EXPECT_EQ(e[i].size, members[data_of[i]].data.size()) << i;
    EXPECT_EQ(listing->parts[i].data_offset, e[i].offset);
    EXPECT_EQ(listing->parts[i].method, members[data_of[i]].method);
    EXPECT_EQ(listing->parts[i].crc32, Crc(members[data_of[i]].data));
  }
  EXPECT_EQ(listing->files.skipped, 0u);
  EXPECT_EQ(listing->files.replaced, 0u);
  auto decoded = Decode(PlanOf(*listing, w.bytes.size()), w.bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, "stored bytes" + text + "tail" + std::string(100, '\0') + "z");
}

TEST_F(ZipTest, Zip64RecordsAndExtraFieldsAreRead) {
  std::vector<Member> members = {
      {"a", "first", 0, true},
      {"b", std::string(3000, 'b'), 8, true},
      {"c", "third", 8, false},
  };
  const Written w = MakeZip(members, {.zip64 = true});
  auto listing = List(w.bytes);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  ASSERT_EQ(listing->files.entries.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(listing->files.entries[i].offset, w.data[i]);
    EXPECT_EQ(listing->files.entries[i].size, members[i].data.size());
  }
  auto decoded = Decode(PlanOf(*listing, w.bytes.size()), w.bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, "first" + std::string(3000, 'b') + "third");
}

TEST_F(ZipTest, ACentralDirectoryLargerThanOneReadIsReadInPieces) {
  std::vector<Member> members;
  for (int i = 0; i < 6000; ++i) {
    members.push_back({fmt::format("cls/{}-{:04}.jpg", std::string(200, 'n'), i),
                       fmt::format("{}", i), static_cast<uint16_t>(i % 2 ? 8 : 0)});
  }
  const Written w = MakeZip(members);
  ASSERT_GT(w.end - w.central[0], 1u << 20);
  auto listing = List(w.bytes);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  ASSERT_EQ(listing->files.entries.size(), members.size());
  std::string all;
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(listing->files.entries[i].path, members[i].name);
    EXPECT_EQ(listing->files.entries[i].offset, w.data[i]);
    all += members[i].data;
  }
  auto decoded = Decode(PlanOf(*listing, w.bytes.size()), w.bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, all);
}

TEST_F(ZipTest, LocalHeadersReadByReadersAtOnceGiveTheSameListingAndTheFirstFailure) {
  std::vector<Member> members;
  for (int i = 0; i < 3000; ++i) {
    members.push_back({fmt::format("cls/{:05}.jpg", i), std::string(100 + i % 700, 'a' + i % 26),
                       static_cast<uint16_t>(i % 3 ? 8 : 0)});
  }
  Written w = MakeZip(members);
  const std::filesystem::path path = Write(w.bytes);
  auto reader = OpenFileReader(path);
  ASSERT_TRUE(reader.ok());
  int made = 0;
  std::filesystem::path listed = path;
  const ReaderFactory more = [&]() -> std::unique_ptr<RangeReader> {
    ++made;
    auto r = OpenFileReader(listed);
    return r ? std::move(*r) : nullptr;
  };
  auto parallel = ListZip(**reader, nullptr, more, 4);
  ASSERT_TRUE(parallel.ok()) << parallel.error().message;
  EXPECT_EQ(made, 3);
  ASSERT_EQ(parallel->files.entries.size(), members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(parallel->files.entries[i].offset, w.data[i]);
    EXPECT_EQ(parallel->parts[i].data_offset, w.data[i]);
  }
  // Two damaged local headers in two runs: the earlier one is told.
  w.bytes[w.local[2900]] = 'X';
  w.bytes[w.local[1000]] = 'X';
  listed = Write(w.bytes, "damaged.zip");
  auto damaged = OpenFileReader(listed);
  ASSERT_TRUE(damaged.ok());
  auto refused = ListZip(**damaged, nullptr, more, 4);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.error().message, HasSubstr("cls/01000.jpg"));
}

TEST_F(ZipTest, DataDescriptorsLeaveTheLocalSizesToTheCentralDirectory) {
  std::vector<Member> members = {
      {"a", "streamed", 8, false, true},
      {"b", "streamed too", 0, true, true},
  };
  const Written w = MakeZip(members);
  auto listing = List(w.bytes);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  ASSERT_EQ(listing->files.entries.size(), 2u);
  EXPECT_EQ(listing->files.entries[1].offset, w.data[1]);
  auto decoded = Decode(PlanOf(*listing, w.bytes.size()), w.bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, "streamedstreamed too");
}

TEST_F(ZipTest, SymlinksAndOtherEntriesWithNoBytesAreSkippedAndCounted) {
  const Written w = MakeZip({
      {"link", "target", 0, false, false, 0120777},
      {"fifo", "", 0, false, false, 0010644},
      {"folder", "", 0, false, false, 0040755},
      {"file", "bytes", 0},
  });
  auto listing = List(w.bytes);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  ASSERT_EQ(listing->files.entries.size(), 1u);
  EXPECT_EQ(listing->files.entries[0].path, "file");
  EXPECT_EQ(listing->files.skipped, 2u);
}

TEST_F(ZipTest, TheLastEntryOfAPathWins) {
  const Written w = MakeZip({
      {"a", "old", 0},
      {"b", "file", 0},
      {"./a", "new", 8},
      {"b", "target", 0, false, false, 0120777},
      {"c", "kept", 0},
  });
  auto listing = List(w.bytes);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  ASSERT_EQ(listing->files.entries.size(), 2u);
  EXPECT_EQ(listing->files.entries[0].path, "a");
  EXPECT_EQ(listing->files.entries[0].offset, w.data[2]);
  EXPECT_EQ(listing->files.entries[1].path, "c");
  EXPECT_EQ(listing->files.replaced, 2u);
  EXPECT_EQ(listing->files.skipped, 1u);
  auto decoded = Decode(PlanOf(*listing, w.bytes.size()), w.bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, "newkept");
}

TEST_F(ZipTest, AnEmptyZipIsListedAndRecognised) {
  const Written w = MakeZip({});
  auto listing = List(w.bytes);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  EXPECT_TRUE(listing->files.entries.empty());
  auto reader = OpenFileReader(Write(w.bytes, "empty.zip"));
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(LooksLikeZip(**reader));
  auto full = OpenFileReader(Write(MakeZip({{"a", "b"}}).bytes, "full.zip"));
  ASSERT_TRUE(full.ok());
  EXPECT_TRUE(LooksLikeZip(**full));
  auto other = OpenFileReader(Write(std::string(600, 'x'), "other.bin"));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(LooksLikeZip(**other));
}

TEST_F(ZipTest, ProgressCountsTheArchiveAndItsFiles) {
  const Written w = MakeZip({{"a", "one"}, {"b", std::string(70000, 'q')}, {"c", "three", 0}});
  Progress progress;
  auto listing = List(w.bytes, &progress);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  EXPECT_EQ(progress.total_bytes, w.bytes.size());
  EXPECT_EQ(progress.bytes, w.bytes.size());
  EXPECT_EQ(progress.files, 3u);
}

TEST_F(ZipTest, EncryptedMembersAreRefused) {
  const Written w = MakeZip({{"ok", "x"}, {"secret.jpg", "x", 0, false, false, 0100644, 1}});
  EXPECT_THAT(Refusal(w.bytes),
              AllOf(HasSubstr("a.zip"), HasSubstr("'secret.jpg'"), HasSubstr("encrypted")));
}

TEST_F(ZipTest, MethodsOtherThanStoredAndDeflatedAreRefusedByName) {
  const std::map<uint16_t, std::string> methods = {
      {9, "deflate64"}, {12, "bzip2"}, {14, "LZMA"}, {93, "zstd"}, {95, "xz"}, {99, "method 99"}};
  for (const auto& [method, name] : methods) {
    const Written w = MakeZip({{"m.jpg", "data", method}});
    EXPECT_THAT(Refusal(w.bytes), AllOf(HasSubstr("'m.jpg'"), HasSubstr(name),
                                        HasSubstr("recompress with zip -Z deflate or store it")));
  }
}

TEST_F(ZipTest, SplitArchivesAreRefused) {
  Written w = MakeZip({{"a", "x"}});
  Set16(w.bytes, w.end + 4, 1);  // this disk's number
  EXPECT_THAT(Refusal(w.bytes), AllOf(HasSubstr("a.zip"), HasSubstr("split over several disks")));
  Written w64 = MakeZip({{"a", "x"}}, {.zip64 = true});
  Set32(w64.bytes, w64.end - 4, 3);  // the locator's count of disks
  EXPECT_THAT(Refusal(w64.bytes), HasSubstr("split over several disks"));
}

TEST_F(ZipTest, DataPastTheCentralDirectoryAreRefused) {
  // With a data descriptor the local header holds no sizes to disagree with.
  Written w = MakeZip({{"a", "x", 0}, {"big", "yyyy", 8, false, true}});
  Set32(w.bytes, w.central[1] + 20, 100000);  // stored size
  EXPECT_THAT(Refusal(w.bytes), AllOf(HasSubstr("'big'"), HasSubstr("run past the start of the "
                                                                    "central directory")));
}

TEST_F(ZipTest, OverlappingMembersAreRefused) {
  Written w = MakeZip({{"a", std::string(200, 'a'), 0}, {"b", "bbb", 0}});
  Set32(w.bytes, w.central[1] + 42, w.data[0] + 10);  // b's local header inside a's data
  EXPECT_THAT(Refusal(w.bytes), AllOf(HasSubstr("'b'"), HasSubstr("'a'"), HasSubstr("overlap")));
}

TEST_F(ZipTest, StoredMembersWhoseSizesDifferAreRefused) {
  Written w = MakeZip({{"s", "abcd", 0}});
  Set32(w.bytes, w.central[0] + 24, 5);  // decoded size
  EXPECT_THAT(Refusal(w.bytes), AllOf(HasSubstr("'s'"), HasSubstr("stored size (4) differs")));
}

TEST_F(ZipTest, LocalHeadersThatDisagreeAreRefused) {
  const std::vector<Member> members = {{"name", "data", 8}};
  Written name = MakeZip(members);
  name.bytes[name.local[0] + 30] = 'N';
  EXPECT_THAT(Refusal(name.bytes), AllOf(HasSubstr("'name'"), HasSubstr("it names 'Name'")));
  Written method = MakeZip(members);
  Set16(method.bytes, method.local[0] + 8, 0);
  EXPECT_THAT(Refusal(method.bytes), AllOf(HasSubstr("'name'"), HasSubstr("its method is 0")));
  Written crc = MakeZip(members);
  Set32(crc.bytes, crc.local[0] + 14, 0x12345678);
  EXPECT_THAT(Refusal(crc.bytes), AllOf(HasSubstr("'name'"), HasSubstr("CRC-32 is 12345678")));
  Written size = MakeZip(members);
  Set32(size.bytes, size.local[0] + 22, 77);
  EXPECT_THAT(Refusal(size.bytes), AllOf(HasSubstr("'name'"), HasSubstr("its sizes are")));
  Written signature = MakeZip(members);
  signature.bytes[signature.local[0]] = 'Q';
  EXPECT_THAT(Refusal(signature.bytes), AllOf(HasSubstr("'name'"), HasSubstr("no local header")));
}

TEST_F(ZipTest, NamesTheRulesRefuseAreRefused) {
  EXPECT_THAT(Refusal(MakeZip({{"a/../b", "x"}}).bytes),
              AllOf(HasSubstr("a.zip"), HasSubstr("'a/../b'"), HasSubstr("segment '..'")));
  EXPECT_THAT(Refusal(MakeZip({{std::string(300, 'n'), "x"}}).bytes), HasSubstr("is invalid"));
}

TEST_F(ZipTest, DamagedCentralDirectoriesAreRefused) {
  Written count = MakeZip({{"a", "x"}, {"b", "y"}});
  Set16(count.bytes, count.end + 8, 3);
  Set16(count.bytes, count.end + 10, 3);
  EXPECT_THAT(Refusal(count.bytes), HasSubstr("central directory"));
  Written size = MakeZip({{"a", "x"}, {"b", "y"}});
  Set16(size.bytes, size.end + 8, 1);
  Set16(size.bytes, size.end + 10, 1);
  EXPECT_THAT(Refusal(size.bytes), HasSubstr("1 entries take"));
  Written entry = MakeZip({{"a", "x"}, {"b", "y"}});
  entry.bytes[entry.central[1]] = 'X';
  EXPECT_THAT(Refusal(entry.bytes), HasSubstr("entry 2 of 2"));
  const Written whole = MakeZip({{"a", "x"}});
  EXPECT_THAT(Refusal(whole.bytes.substr(0, whole.bytes.size() - 5)),
              HasSubstr("no end-of-central-directory record"));
  Written wide = MakeZip({{"a", "x"}});
  Set32(wide.bytes, wide.central[0] + 24, 0xFFFFFFFF);
  EXPECT_THAT(Refusal(wide.bytes), AllOf(HasSubstr("'a'"), HasSubstr("zip64 extra field")));
}

TEST_F(ZipTest, DecodingRefusesDamagedDataNamingTheMember) {
  const Written w = MakeZip({{"a", std::string(4000, 'a'), 8}, {"b", "bee", 0}});
  auto listing = List(w.bytes);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  const DecodePlan plan = PlanOf(*listing, w.bytes.size());
  const MemberNamer name_of = [](uint64_t at) { return at == 0 ? "a" : at == 4000 ? "b" : ""; };
  std::string damaged = w.bytes;
  damaged[w.data[0]] = '\xff';
  auto bad = Decode(plan, damaged, name_of);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message,
              AllOf(HasSubstr("a.zip"), HasSubstr("'a'"), HasSubstr("deflate data")));
  DecodePlan wrong_crc = plan;
  wrong_crc.parts[1].crc32 ^= 1;
  auto crc = Decode(wrong_crc, w.bytes, name_of);
  ASSERT_FALSE(crc.ok());
  EXPECT_THAT(crc.error().message, AllOf(HasSubstr("'b'"), HasSubstr("CRC-32")));
  auto unnamed = Decode(wrong_crc, w.bytes);
  ASSERT_FALSE(unnamed.ok());
  EXPECT_THAT(unnamed.error().message,
              HasSubstr(fmt::format("the member whose data start at byte {}", w.data[1])));
  DecodePlan outside = plan;
  outside.parts[1].data_offset += 1000;
  auto out = Decode(outside, w.bytes, name_of);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.error().message, AllOf(HasSubstr("'b'"), HasSubstr("lie outside")));
  DecodePlan too_many = plan;
  too_many.recipes[0].count = 3;
  EXPECT_FALSE(Decode(too_many, w.bytes).ok());
}

bool HavePython() { return std::system("/usr/bin/python3 -c 'import zipfile' 2>/dev/null") == 0; }

TEST_F(ZipTest, ArchivesWrittenByPythonAreListedAndDecoded) {
  if (!HavePython()) GTEST_SKIP() << "no /usr/bin/python3 with zipfile";
  const std::filesystem::path path = dir_.path() / "py.zip";
  const std::string script =
      "import sys, zipfile\n"
      "with zipfile.ZipFile(sys.argv[1], 'w', compression=zipfile.ZIP_DEFLATED) as z:\n"
      "  z.comment = b'made by python'\n"
      "  z.writestr('cls/one.jpg', b'1' * 10000)\n"
      "  z.writestr('cls/two.jpg', b'two', compress_type=zipfile.ZIP_STORED)\n"
      "  z.writestr('cls/', b'')\n"
      "  with z.open('big/three.bin', 'w', force_zip64=True) as f: f.write(bytes(range(256)) * 9)\n"
      "  i = zipfile.ZipInfo('cls/link.jpg'); i.external_attr = 0o120777 << 16\n"
      "  z.writestr(i, 'one.jpg')\n";
  std::ofstream(dir_.path() / "make.py") << script;
  const std::string command =
      "/usr/bin/python3 " + (dir_.path() / "make.py").string() + " " + path.string();
  ASSERT_EQ(std::system(command.c_str()), 0);
  auto reader = OpenFileReader(path);
  ASSERT_TRUE(reader.ok());
  auto listing = ListZip(**reader);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  std::string range;
  for (int i = 0; i < 9; ++i) {
    for (int b = 0; b < 256; ++b) range += static_cast<char>(b);
  }
  const std::map<std::string, std::string> data = {
      {"cls/one.jpg", std::string(10000, '1')}, {"cls/two.jpg", "two"}, {"big/three.bin", range}};
  ASSERT_EQ(listing->files.entries.size(), 3u);
  EXPECT_EQ(listing->files.skipped, 1u);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto decoded = Decode(PlanOf(*listing, bytes.size()), bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, Joined(*listing, data));
}

TEST_F(ZipTest, ArchivesWrittenByInfoZipAreListedAndDecoded) {
  if (std::system("zip -v >/dev/null 2>&1") != 0) GTEST_SKIP() << "no zip program";
  const std::filesystem::path tree = dir_.path() / "tree";
  std::filesystem::create_directories(tree / "cls");
  std::map<std::string, std::string> data = {
      {"cls/a.jpg", std::string(20000, 'a') + "end"}, {"cls/b.jpg", "b"}, {"top.txt", "top level"}};
  for (const auto& [name, bytes] : data) std::ofstream(tree / name, std::ios::binary) << bytes;
  std::filesystem::create_symlink("a.jpg", tree / "cls" / "link.jpg");
  const std::string command =
      "cd " + tree.string() + " && zip -q -r -y -fz ../info.zip cls top.txt";
  ASSERT_EQ(std::system(command.c_str()), 0);
  const std::filesystem::path path = dir_.path() / "info.zip";
  auto reader = OpenFileReader(path);
  ASSERT_TRUE(reader.ok());
  auto listing = ListZip(**reader);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  ASSERT_EQ(listing->files.entries.size(), 3u);
  EXPECT_EQ(listing->files.skipped, 1u);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto decoded = Decode(PlanOf(*listing, bytes.size()), bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(*decoded, Joined(*listing, data));
}

}  // namespace
}  // namespace gpufs
