#include "dataset/format/tar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>
#include <vector>

#include "dataset/format/tar_header.h"
#include "dataset/open/open_dataset.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Archives written header by header, so that each test holds exactly the records it is
// about (no tar writer emits a signed checksum or an unknown type on request).
class TarBuilder {
 public:
  // A header of `type` naming `name` (and `link`), followed by `data`.
  TarBuilder& Add(std::string_view name, char type, std::string_view data = {},
                  std::string_view link = {}) {
    bytes_ += Header(name, type, data.size(), link);
    bytes_ += Padded(data);
    return *this;
  }
  // A header whose size field says `size`, with no data after it.
  TarBuilder& HeaderOnly(std::string_view name, char type, size_t size) {
    bytes_ += Header(name, type, size, {});
    return *this;
  }
  TarBuilder& File(std::string_view name, std::string_view data) { return Add(name, '0', data); }
  // A pax header ('x' or 'g') carrying `records` in order.
  TarBuilder& Pax(char type, const std::vector<std::pair<std::string, std::string>>& records) {
    std::string text;
    for (const auto& [key, value] : records) text += Record(key, value);
    return Add("PaxHeader", type, text);
  }
  // The last header's checksum as the sum of signed chars, as old writers made it.
  TarBuilder& SignLastChecksum() {
    char* block = bytes_.data() + last_header_;
    int sum = 0;
    for (size_t i = 0; i < kTarBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<signed char>(block[i]);
    }
    std::snprintf(block + 148, 8, "%06o", sum);
    block[155] = ' ';
    return *this;
  }
  std::string Bytes() const { return bytes_ + std::string(2 * kTarBlock, '\0'); }
  // The bytes so far, with no end marker, leaving none: a large archive is written in pieces.
  std::string Take() { return std::exchange(bytes_, {}); }
  size_t size() const { return bytes_.size(); }

 private:
  std::string Header(std::string_view name, char type, size_t size, std::string_view link) {
    std::string block(kTarBlock, '\0');
    name.copy(block.data(), std::min<size_t>(name.size(), 100));
    std::snprintf(block.data() + 100, 8, "%07o", 0644);
    std::snprintf(block.data() + 124, 12, "%011zo", size);
    block[156] = type;
    link.copy(block.data() + 157, std::min<size_t>(link.size(), 100));
    std::memcpy(block.data() + 257,
                "ustar\0"
                "00",
                8);
    unsigned sum = 0;
    for (size_t i = 0; i < kTarBlock; ++i) {
      sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(block[i]);
    }
    std::snprintf(block.data() + 148, 8, "%06o", sum);
    block[155] = ' ';
    last_header_ = bytes_.size();
    return block;
  }
  static std::string Padded(std::string_view data) {
    std::string out(data);
    out.resize((data.size() + kTarBlock - 1) / kTarBlock * kTarBlock, '\0');
    return out;
  }
  // "<length> key=value\n", where the length counts its own digits.
  static std::string Record(const std::string& key, const std::string& value) {
    const size_t body = key.size() + value.size() + 3;  // ' ', '=', '\n'
    size_t length = body + 1;
    while (std::to_string(length).size() + body != length) ++length;
    return std::to_string(length) + " " + key + "=" + value + "\n";
  }

  std::string bytes_;
  size_t last_header_ = 0;
};

using Files = std::map<std::string, std::string>;

uint64_t RoundedUp(uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

class TarListingTest : public ::testing::Test {
 protected:
  Result<TarListing> List(const TarBuilder& tar) {
    const auto path = dir_.path() / "a.tar";
    std::ofstream(path, std::ios::binary) << tar.Bytes();
    return ListTar(path);
  }
  // {path: bytes} of a listing, read back from the archive.
  Files Listed(const TarBuilder& tar) {
    auto listing = List(tar);
    EXPECT_TRUE(listing.ok()) << listing.error().message;
    Files out;
    if (!listing) return out;
    const std::string bytes = tar.Bytes();
    for (const TarEntry& e : listing->entries) {
      out[std::string(e.path)] = bytes.substr(e.offset, e.size);
    }
    return out;
  }
  std::string Refusal(const TarBuilder& tar) {
    auto listing = List(tar);
    EXPECT_FALSE(listing.ok());
    return listing.ok() ? "" : listing.error().message;
  }

  TempDir dir_;
};

TEST(TarHeader, AcceptsSignedAndUnsignedChecksums) {
  TarBuilder tar;
  tar.File("cls/\xc3\xa9t\xc3\xa9.jpg", "x");  // bytes past 0x7f: the two sums differ
  std::string block = tar.Bytes().substr(0, kTarBlock);
  EXPECT_TRUE(TarChecksumOk(block.data()));
  tar.SignLastChecksum();
  const std::string signed_block = tar.Bytes().substr(0, kTarBlock);
  EXPECT_NE(block, signed_block);
  EXPECT_TRUE(TarChecksumOk(signed_block.data()));
  block[0] ^= 1;
  EXPECT_FALSE(TarChecksumOk(block.data()));
}

TEST_F(TarListingTest, ReadsAnArchiveWhoseFirstHeaderHasASignedChecksum) {
  TarBuilder tar;
  tar.File("cls/\xc3\xa9.jpg", "first").SignLastChecksum().File("cls/b.jpg", "bee");
  EXPECT_EQ(Listed(tar), (Files{{"cls/\xc3\xa9.jpg", "first"}, {"cls/b.jpg", "bee"}}));
  auto reader = OpenFileReader(dir_.path() / "a.tar");
  ASSERT_TRUE(reader.ok());
  EXPECT_TRUE(LooksLikeTar(**reader));
}

// Two files whose names share their first 100 bytes, and one named by those 100 bytes:
// a link resolved by the header's field alone would land on the wrong one.
TarBuilder LongNamedFiles() {
  const std::string stem = "cls/" + std::string(96, 'n');
  TarBuilder tar;
  tar.File(stem, "short");
  tar.Add("././@LongLink", 'L', stem + "-first").File(stem.substr(0, 100), "first");
  tar.Pax('x', {{"path", stem + "-second"}}).File(stem.substr(0, 100), "second");
  return tar;
}

TEST_F(TarListingTest, FollowsGnuLongLinkTargets) {
  const std::string stem = "cls/" + std::string(96, 'n');
  TarBuilder tar = LongNamedFiles();
  tar.Add("././@LongLink", 'K', stem + "-first").Add("cls/link", '1', {}, stem);
  const Files files = Listed(tar);
  EXPECT_EQ(files.at("cls/link"), "first");
  EXPECT_EQ(files.size(), 4u);
}

TEST_F(TarListingTest, FollowsPaxLinkpaths) {
  const std::string stem = "cls/" + std::string(96, 'n');
  TarBuilder tar = LongNamedFiles();
  tar.Pax('x', {{"linkpath", stem + "-second"}}).Add("cls/link", '1', {}, stem);
  EXPECT_EQ(Listed(tar).at("cls/link"), "second");
}

TEST_F(TarListingTest, AppliesAnExtendedHeaderToTheMemberAfterAGlobalOne) {
  TarBuilder tar;
  tar.Pax('x', {{"path", "cls/real.jpg"}, {"size", "4"}})
      .Pax('g', {{"comment", "written by a test"}})
      .File("cls/header-name.jpg", "real");
  EXPECT_EQ(Listed(tar), (Files{{"cls/real.jpg", "real"}}));
}

TEST_F(TarListingTest, ASecondExtendedHeaderReplacesTheFirst) {
  TarBuilder tar;
  tar.Pax('x', {{"path", "cls/lost.jpg"}}).Pax('x', {{"comment", "second"}}).File("cls/a.jpg", "a");
  EXPECT_EQ(Listed(tar), (Files{{"cls/a.jpg", "a"}}));
}

TEST_F(TarListingTest, RefusesAGlobalHeaderThatSetsEveryMembersPath) {
  TarBuilder tar;
  tar.Pax('g', {{"path", "cls/all.jpg"}}).File("cls/a.jpg", "a");
  EXPECT_THAT(Refusal(tar), HasSubstr("global pax header sets 'path'"));
}

TEST_F(TarListingTest, ReadsMembersOfUnknownTypesAsRegularFiles) {
  TarBuilder tar;
  tar.Add("cls/z.jpg", 'Z', "zed").Add("cls/n.jpg", 'N', "old names").File("cls/a.jpg", "a");
  EXPECT_EQ(Listed(tar),
            (Files{{"cls/z.jpg", "zed"}, {"cls/n.jpg", "old names"}, {"cls/a.jpg", "a"}}));
}

TEST_F(TarListingTest, ReadsV7FolderEntriesAsFolders) {
  TarBuilder tar;
  tar.Add("cls/", '\0').Add("cls/sub/", '0').Add("cls/sub/a.jpg", '\0', "a");
  tar.Add("cls/b/", '7').File("cls/b/b.jpg", "b");
  auto listing = List(tar);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  ASSERT_EQ(listing->entries.size(), 2u);
  EXPECT_EQ(listing->entries[0].path, "cls/sub/a.jpg");
  EXPECT_EQ(listing->skipped, 0u);
  EXPECT_EQ(listing->replaced, 0u);
}

TEST_F(TarListingTest, KeepsWhatTheLastMemberOfAPathIs) {
  TarBuilder tar;
  tar.File("cls/sym.jpg", "gone").Add("cls/sym.jpg", '2', {}, "b.jpg");
  tar.File("cls/fifo.jpg", "gone").Add("cls/fifo.jpg", '6');
  tar.File("cls/dir", "gone").Add("cls/dir/", '0');
  tar.Add("cls/back.jpg", '2', {}, "x").File("cls/back.jpg", "file again");
  tar.File("cls/b.jpg", "bee");
  EXPECT_EQ(Listed(tar), (Files{{"cls/back.jpg", "file again"}, {"cls/b.jpg", "bee"}}));
  auto listing = List(tar);
  ASSERT_TRUE(listing.ok());
  EXPECT_EQ(listing->replaced, 4u);
  EXPECT_EQ(listing->skipped, 2u);
}

TEST_F(TarListingTest, LeavesOutAHardLinkToASymbolicLink) {
  TarBuilder tar;
  tar.File("cls/t.jpg", "target").Add("cls/s.jpg", '2', {}, "t.jpg");
  tar.Add("cls/h.jpg", '1', {}, "cls/s.jpg");
  EXPECT_EQ(Listed(tar), (Files{{"cls/t.jpg", "target"}}));
  EXPECT_EQ(List(tar)->skipped, 2u);
  // A link names its target as it is then: a file replaced later keeps its bytes in it.
  TarBuilder later;
  later.File("cls/a.jpg", "old").Add("cls/h.jpg", '1', {}, "cls/a.jpg").File("cls/a.jpg", "new");
  EXPECT_EQ(Listed(later), (Files{{"cls/a.jpg", "new"}, {"cls/h.jpg", "old"}}));
}

TEST_F(TarListingTest, ReadsNoDataAfterLinksDevicesFifosAndFolders) {
  // GNU tar reads the next header right after these, whatever their size field says.
  TarBuilder tar;
  for (char type : {'2', '3', '4', '5', '6'}) tar.HeaderOnly(std::string("cls/") + type, type, 700);
  tar.File("cls/a.jpg", "a");
  // A dumpdir's listing is data, skipped like a file's.
  tar.Add("cls/dumped", 'D', std::string("Nfile\0\0", 7)).File("cls/b.jpg", "b");
  EXPECT_EQ(Listed(tar), (Files{{"cls/a.jpg", "a"}, {"cls/b.jpg", "b"}}));
  EXPECT_EQ(List(tar)->skipped, 4u);  // the folders are not counted
}

TEST_F(TarListingTest, RefusesSparseMembersNamingTheirRealName) {
  TarBuilder pax10;
  pax10
      .Pax('x', {{"GNU.sparse.major", "1"},
                 {"GNU.sparse.minor", "0"},
                 {"GNU.sparse.name", "cls/holes.bin"},
                 {"GNU.sparse.realsize", "4096"}})
      .File("cls/GNUSparseFile.0/holes.bin", std::string(512, '1'));
  EXPECT_THAT(Refusal(pax10), AllOf(HasSubstr("'cls/holes.bin' is a sparse file"),
                                    Not(HasSubstr("GNUSparseFile"))));
  TarBuilder pax00;
  pax00
      .Pax('x', {{"GNU.sparse.size", "4096"},
                 {"GNU.sparse.numblocks", "1"},
                 {"GNU.sparse.offset", "0"},
                 {"GNU.sparse.numbytes", "1"}})
      .File("cls/holes.bin", "1");
  EXPECT_THAT(Refusal(pax00), HasSubstr("'cls/holes.bin' is a sparse file"));
  TarBuilder gnu;
  gnu.Add("cls/holes.bin", 'S', "1");
  EXPECT_THAT(Refusal(gnu), HasSubstr("'cls/holes.bin' is a sparse file"));
}

TEST_F(TarListingTest, ListsInnerArchivesOnlyWhenEachNamesAFolder) {
  TarBuilder inner;
  inner.File("a.JPEG", "a");
  TarBuilder outer;
  outer.File("n01.tar", inner.Bytes()).File("n02.tar", inner.Bytes());
  auto listing = List(outer);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  EXPECT_TRUE(listing->nested);
  EXPECT_EQ(listing->entries[1].path, "n02/a.JPEG");
  TarBuilder unnamed;  // "n./.tar" less ".tar" is no folder's name
  unnamed.File("n01.tar", inner.Bytes()).File("n./.tar", inner.Bytes());
  listing = List(unnamed);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  EXPECT_FALSE(listing->nested);
  EXPECT_EQ(listing->entries[1].path, "n./.tar");
}

// Far more members than one read of the archive holds, so that headers, long names and
// pax records are found across many reads: some in the same piece as the previous header,
// some straddling two, and some after members larger than a piece, which are skipped.
// Folders come in blocks, out of order, as archives of ImageNet-21k's classes have them;
// the catalog made of the listing finds every member where it was written.
TEST_F(TarListingTest, ListsAMillionMembersAcrossManyReads) {
  constexpr size_t kMembers = 1'050'000;
  const auto path = dir_.path() / "big.tar";
  std::ofstream out(path, std::ios::binary);
  std::vector<std::string> names;  // the entries' views point into these
  std::vector<TarEntry> written;
  names.reserve(kMembers);
  written.reserve(kMembers);
  uint64_t flushed = 0;
  TarBuilder tar;
  for (size_t i = 0; i < kMembers; ++i) {
    const size_t folder = i / 30'000 * 7 % 37;
    std::string name = fmt::format("class{:02}/m{}.jpg", folder, i);
    if (i % 101 == 0) name = fmt::format("class{:02}/{}-{}.jpg", folder, std::string(120, 'l'), i);
    const size_t size = i % 250'001 == 7 ? kLocalTarChunk + 1000 : (i % 3 == 0 ? i % 700 : 0);
    const std::string data(size, static_cast<char>('a' + i % 26));
    if (i % 101 == 0) {
      tar.Add("././@LongLink", 'L', name);
      tar.File(name.substr(0, 100), data);
    } else if (i % 103 == 0) {
      tar.Pax('x', {{"path", name}});
      tar.File("ignored-by-pax", data);
    } else {
      tar.File(name, data);
    }
    names.push_back(name);
    written.push_back(TarEntry{names.back(), flushed + tar.size() - RoundedUp(size), size});
    if (tar.size() > (1u << 20)) {
      flushed += tar.size();
      out << tar.Take();
    }
  }
  out << tar.Bytes();
  out.close();
  ASSERT_TRUE(out.good());
  auto listing = ListTar(path);
  ASSERT_TRUE(listing.ok()) << listing.error().message;
  ASSERT_EQ(listing->entries.size(), kMembers);
  EXPECT_EQ(listing->skipped + listing->replaced, 0u);
  size_t wrong = 0;
  for (size_t i = 0; i < kMembers; ++i) {
    const TarEntry& got = listing->entries[i];
    const TarEntry& want = written[i];
    if (got.path == want.path && got.offset == want.offset && got.size == want.size) continue;
    if (++wrong <= 5) {
      ADD_FAILURE() << "member " << i << ": " << got.path << " at " << got.offset << " ("
                    << got.size << " bytes), written " << want.path << " at " << want.offset << " ("
                    << want.size << " bytes)";
    }
  }
  EXPECT_EQ(wrong, 0u);
  auto d = TarDataset(path, *listing, SourceStamp{std::filesystem::file_size(path), 0}, 1 << 20);
  ASSERT_TRUE(d.ok()) << d.error().message;
  const Catalog& catalog = d->catalog;
  EXPECT_EQ(catalog.file_count(), kMembers);
  EXPECT_EQ(catalog.classes().size(), 35u);
  for (size_t i = 0; i < kMembers; ++i) {
    const auto node = catalog.FindPath(written[i].path);
    const FileExtent e = node ? catalog.Extent(*node) : FileExtent{};
    if (node && e.offset == written[i].offset && e.size == written[i].size) continue;
    if (++wrong <= 5)
      ADD_FAILURE() << "member " << i << " " << written[i].path << " in the catalog";
  }
  EXPECT_EQ(wrong, 0u);
}

// A damaged header far into an archive, past the first read, is named by its byte offset.
TEST_F(TarListingTest, ADamagedHeaderDeepInTheArchiveIsNamedByItsOffset) {
  TarBuilder tar;
  for (int i = 0; i < 20'000; ++i) tar.File(fmt::format("cls/{}.jpg", i), "x");
  const size_t damaged = tar.size();
  tar.File("cls/damaged.jpg", "y");
  std::string bytes = tar.Bytes();
  bytes[damaged + 10] ^= 1;
  const auto path = dir_.path() / "a.tar";
  std::ofstream(path, std::ios::binary) << bytes;
  auto listing = ListTar(path);
  ASSERT_FALSE(listing.ok());
  EXPECT_THAT(listing.error().message,
              AllOf(HasSubstr(fmt::format("at byte {}: bad header checksum", damaged)),
                    HasSubstr("a.tar")));
  TarBuilder escaping;
  for (int i = 0; i < 20'000; ++i) escaping.File(fmt::format("cls/{}.jpg", i), "x");
  const size_t member = escaping.size() + kTarBlock;
  escaping.File("cls/../../up.jpg", "z");
  EXPECT_THAT(Refusal(escaping), AllOf(HasSubstr(fmt::format("at byte {}: entry ", member)),
                                       HasSubstr("cls/../../up.jpg")));
  TarBuilder cut;
  for (int i = 0; i < 20'000; ++i) cut.File(fmt::format("cls/{}.jpg", i), "x");
  const size_t end = cut.size();
  std::ofstream(path, std::ios::binary) << cut.Take() << std::string(100, 'h');
  listing = ListTar(path);
  ASSERT_FALSE(listing.ok());
  EXPECT_THAT(
      listing.error().message,
      HasSubstr(fmt::format("at byte {}: the archive ends in the middle of a header", end)));
}

TEST(TarDataset, NotesCountEachKindApartAndNameTheWrapperFolder) {
  TarListing listing;
  listing.entries = {{"imagenette2/train/cat/1.jpg", 512, 3},
                     {"imagenette2/val/cat/2.jpg", 1536, 4}};
  listing.skipped = 2;
  listing.replaced = 3;
  auto d = TarDataset("/data/a.tar", listing, SourceStamp{4096, 0}, 1 << 20);
  ASSERT_TRUE(d.ok()) << d.error().message;
  std::string notes;
  for (const std::string& note : d->notes) notes += note + "\n";
  EXPECT_THAT(notes, HasSubstr("2 symbolic links, devices or fifos"));
  EXPECT_THAT(notes, HasSubstr("3 members of the archive are replaced by a later member"));
  EXPECT_THAT(notes, HasSubstr("lie in the folder imagenette2/"));
  EXPECT_EQ(d->notes.size(), 3u);
}

// A listing saved by an older reader of an archive that has not changed since may differ
// from what this reader lists (a long link target, a v7 folder): it is made again.
TEST(TarDataset, AnIndexSavedByAnOlderReaderIsListedAgain) {
  TempDir dir;
  const auto archive = dir.path() / "a.tar";
  {
    std::ofstream out(archive, std::ios::binary);
    out << TarBuilder().File("cat/1.jpg", "abc").Add("cat/sub/", '0').Bytes();
  }
  OpenOptions options;
  options.cache_dir = dir.path() / "cache";
  auto first = OpenDataset(archive, options);
  ASSERT_TRUE(first.ok()) << first.error().message;
  auto saved = OpenNativeIndex(first->index);
  ASSERT_TRUE(saved.ok()) << saved.error().message;
  EXPECT_TRUE(saved->info.tar_listed_as_extracted);
  IndexInfo older = saved->info;
  older.tar_listed_as_extracted = false;
  ASSERT_TRUE(WriteNativeIndex(saved->catalog, older, first->index, FileAccess::Shared()).ok());
  auto again = OpenDataset(archive, options);
  ASSERT_TRUE(again.ok()) << again.error().message;
  std::string notes;
  for (const std::string& note : again->notes) notes += note + "\n";
  EXPECT_THAT(notes, HasSubstr("was made by an older reader"));
  auto resaved = OpenNativeIndex(again->index);
  ASSERT_TRUE(resaved.ok()) << resaved.error().message;
  EXPECT_TRUE(resaved->info.tar_listed_as_extracted);
}

}  // namespace
}  // namespace gpufs
