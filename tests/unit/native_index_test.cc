#include "dataset/format/native_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "base/file_io.h"
#include "base/private_files.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "dataset/open/open_dataset.h"
#include "dataset/open/reindex.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

using ::testing::HasSubstr;

DatasetSpec SampleSpec() {
  DatasetSpec spec;
  spec.index_file = "test";
  spec.classes = {"cat", "dog"};
  spec.folders = {"train/cat", "train/dog", "val/cat", "val/dog"};
  spec.has_checksums = true;
  spec.groups = {GroupSpec{"blob-0", 0, 30, 0}, GroupSpec{"blob-1", 0, 20, 0}};
  spec.members = {
      MemberSpec{"train/cat/a.jpg", 0, 0, 0, 10, 111, 1},
      MemberSpec{"train/dog/b b.jpg", 1, 0, 10, 20, 222, 2},
      MemberSpec{"val/cat/\xc3\xa9.jpg", 0, 1, 0, 20, 333, 3},
  };
  return spec;
}

class NativeIndexTest : public ::testing::Test {
 protected:
  std::filesystem::path Write(const Catalog& catalog) {
    const auto path = dir_.path() / "index.gpufs";
    IndexInfo info;
    info.source = SourceStamp{1234, 5678};
    info.alignment = 4096;
    info.blobs = {BlobInfo{30, 77}, BlobInfo{20, 88}};
    Status s = WriteNativeIndex(catalog, info, path, FileAccess::Shared());
    EXPECT_TRUE(s.ok()) << s.error().message;
    return path;
  }

  std::string OpenError(const std::filesystem::path& path) {
    auto opened = OpenNativeIndex(path);
    EXPECT_FALSE(opened.ok());
    return opened.ok() ? "" : opened.error().message;
  }

  void Patch(const std::filesystem::path& path, size_t offset, char value) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(value);
  }

  TempDir dir_;
};

TEST_F(NativeIndexTest, RoundTripsTheWholeCatalog) {
  auto built = CatalogFromSpec(SampleSpec());
  ASSERT_TRUE(built.ok()) << built.error().message;
  auto opened = OpenNativeIndex(Write(*built));
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  const Catalog& c = opened->catalog;
  EXPECT_EQ(c.node_count(), built->node_count());
  EXPECT_EQ(c.file_count(), 3u);
  EXPECT_EQ(c.total_bytes(), 50u);
  EXPECT_TRUE(c.has_checksums());
  EXPECT_THAT(c.classes(), ::testing::ElementsAre("cat", "dog"));
  EXPECT_THAT(c.blobs(), ::testing::ElementsAre("blob-0", "blob-1"));
  auto b = c.FindPath("train/dog/b b.jpg");
  ASSERT_TRUE(b);
  EXPECT_EQ(c.Extent(*b).offset, 10u);
  EXPECT_EQ(c.ChecksumAt(c.FileIndex(*b)), 222u);
  EXPECT_EQ(c.ClassAt(c.FileIndex(*b)), 1u);
  EXPECT_EQ(c.Group(1).size, 20u);
  EXPECT_TRUE(c.FindPath("val/dog"));  // an empty class folder survives
  EXPECT_EQ(c.PathOf(*c.FindPath("val/cat/\xc3\xa9.jpg")), "val/cat/\xc3\xa9.jpg");
  EXPECT_EQ(opened->info.source, (SourceStamp{1234, 5678}));
  EXPECT_EQ(opened->info.alignment, 4096u);
  EXPECT_EQ(opened->info.blobs[1].checksum, 88u);
}

uint32_t VersionOf(const std::filesystem::path& path) {
  const std::string bytes = *ReadWholeFile(path);
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, sizeof(version));
  return version;
}

TEST_F(NativeIndexTest, RoundTripsSha256Digests) {
  DatasetSpec spec = SampleSpec();
  spec.has_sha256 = true;
  for (size_t i = 0; i < spec.members.size(); ++i) {
    const std::string bytes(10 + i, static_cast<char>('a' + i));
    spec.members[i].sha256 = Sha256Of(bytes.data(), bytes.size());
  }
  auto built = CatalogFromSpec(spec);
  ASSERT_TRUE(built.ok()) << built.error().message;
  const auto path = Write(*built);
  EXPECT_EQ(VersionOf(path), kNativeIndexVersion);
  auto opened = OpenNativeIndex(path);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  const Catalog& c = opened->catalog;
  ASSERT_TRUE(c.has_sha256());
  EXPECT_TRUE(c.has_checksums());
  for (const MemberSpec& m : spec.members) {
    const NodeId id = *c.FindPath(m.path);
    ASSERT_NE(c.Sha256(c.FileIndex(id)), nullptr);
    EXPECT_EQ(*c.Sha256(c.FileIndex(id)), m.sha256) << m.path;
    EXPECT_EQ(c.ChecksumAt(c.FileIndex(id)), m.checksum);
  }
  EXPECT_EQ(opened->info.blobs[1].checksum, 88u);
}

// A tar's index has no digests: the side table is empty, and so is the section.
TEST_F(NativeIndexTest, WritesAndOpensAnIndexWithoutDigests) {
  auto built = CatalogFromSpec(SampleSpec());
  const auto path = Write(*built);
  EXPECT_EQ(VersionOf(path), kNativeIndexVersion);
  auto opened = OpenNativeIndex(path);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_FALSE(opened->catalog.has_sha256());
  EXPECT_EQ(opened->catalog.Sha256(0), nullptr);
  EXPECT_EQ(opened->catalog.file_count(), 3u);
}

// Versions 1 and 2 laid a node and a 32-byte extent out per file: refused with a code the
// openers act on (rebuild a tar's, pass over a mytar folder's) and a message for a pack's.
TEST_F(NativeIndexTest, RefusesAnOlderVersionSayingHowToRewriteIt) {
  auto built = CatalogFromSpec(SampleSpec());
  const auto path = Write(*built);
  for (char version : {1, 2}) {
    Patch(path, 8, version);
    auto opened = OpenNativeIndex(path);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.error().code, kOldIndexVersion);
    EXPECT_THAT(opened.error().message, HasSubstr(path.string()));
    EXPECT_THAT(opened.error().message, HasSubstr("run `gpufsd pack` again"));
  }
}

TEST_F(NativeIndexTest, RefusesDigestsThatDoNotMatchTheFileTable) {
  DatasetSpec spec = SampleSpec();
  spec.has_sha256 = true;
  auto built = CatalogFromSpec(spec);
  CatalogTables t = built->tables();
  t.sha256 = t.sha256.first(2);
  EXPECT_FALSE(WriteNativeIndex(Catalog(t, nullptr), IndexInfo{{}, 0, {{30, 0}, {20, 0}}},
                                dir_.path() / "index.gpufs", FileAccess::Shared())
                   .ok());
}

// A pack as `gpufsd pack` wrote it before digests: real blobs, XXH3 checksums, no digests.
class ReindexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_ = SampleSpec();
    const std::string blob0 = "0123456789abcdefghijABCDEFGHIJ";
    const std::string blob1 = "klmnopqrstuvwxyzKLMN";
    ASSERT_TRUE(WriteFileAtomically(dir_.path() / "blob-0", blob0, FileAccess::Shared()).ok());
    ASSERT_TRUE(WriteFileAtomically(dir_.path() / "blob-1", blob1, FileAccess::Shared()).ok());
    const std::string* blobs[] = {&blob0, &blob0, &blob1};
    for (size_t i = 0; i < spec_.members.size(); ++i) {
      MemberSpec& m = spec_.members[i];
      const std::string bytes = blobs[i]->substr(m.offset, m.size);
      m.checksum = ChecksumOf(bytes.data(), bytes.size());
      bytes_.push_back(bytes);
    }
    auto built = CatalogFromSpec(spec_);
    IndexInfo info;
    info.blobs = {BlobInfo{30, ChecksumOf(blob0.data(), 30)},
                  BlobInfo{20, ChecksumOf(blob1.data(), 20)}};
    ASSERT_TRUE(
        WriteNativeIndex(*built, info, dir_.path() / "index.gpufs", FileAccess::Shared()).ok());
    ASSERT_FALSE(OpenNativeIndex(dir_.path() / "index.gpufs")->catalog.has_sha256());
  }

  DatasetSpec spec_;
  std::vector<std::string> bytes_;  // each member's, in spec order
  TempDir dir_;
};

TEST_F(ReindexTest, AddsDigestsToAVersion1PackWithoutTouchingItsBlobs) {
  const auto blob_time = std::filesystem::last_write_time(dir_.path() / "blob-0");
  Progress progress;
  auto indexed = IndexDataset(dir_.path().string(), std::nullopt, 2, progress);
  ASSERT_TRUE(indexed.ok()) << indexed.error().message;
  EXPECT_EQ(indexed->files, 3u);
  EXPECT_EQ(VersionOf(dir_.path() / "index.gpufs"), kNativeIndexVersion);
  EXPECT_EQ(std::filesystem::last_write_time(dir_.path() / "blob-0"), blob_time);
  auto opened = OpenDataset(dir_.path(), OpenOptions{});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ(opened->format, "native");
  const Catalog& c = opened->catalog;
  ASSERT_TRUE(c.has_sha256());
  for (size_t i = 0; i < spec_.members.size(); ++i) {
    const NodeId id = *c.FindPath(spec_.members[i].path);
    EXPECT_EQ(*c.Sha256(c.FileIndex(id)), Sha256Of(bytes_[i].data(), bytes_[i].size()));
    EXPECT_EQ(c.ChecksumAt(c.FileIndex(id)), spec_.members[i].checksum);
  }
}

TEST_F(ReindexTest, RefusesToRecordTheDigestsOfADamagedBlob) {
  ASSERT_TRUE(
      WriteFileAtomically(dir_.path() / "blob-1", "KLMNOPQRSTUVWXYZklmn", FileAccess::Shared())
          .ok());
  Progress progress;
  auto indexed = IndexDataset(dir_.path().string(), std::nullopt, 1, progress);
  ASSERT_FALSE(indexed.ok());
  EXPECT_THAT(indexed.error().message, HasSubstr("does not match its checksum"));
  EXPECT_FALSE(OpenNativeIndex(dir_.path() / "index.gpufs")->catalog.has_sha256());
}

TEST_F(NativeIndexTest, WritesIdenticalBytesForIdenticalInput) {
  auto a = CatalogFromSpec(SampleSpec());
  auto b = CatalogFromSpec(SampleSpec());
  const auto path = Write(*a);
  auto first = ReadWholeFile(path);
  Write(*b);
  EXPECT_EQ(*first, *ReadWholeFile(path));
}

TEST_F(NativeIndexTest, RefusesAFileThatIsNotAnIndex) {
  const auto path = dir_.path() / "index.gpufs";
  ASSERT_TRUE(WriteFileAtomically(path, std::string(400, 'x'), FileAccess::Shared()).ok());
  EXPECT_THAT(OpenError(path), HasSubstr("not a gpufs index"));
  ASSERT_TRUE(WriteFileAtomically(path, "GPUFS", FileAccess::Shared()).ok());
  EXPECT_THAT(OpenError(path), HasSubstr("shorter than a header"));
  EXPECT_THAT(OpenError(dir_.path() / "missing"), HasSubstr("No such file"));
}

TEST_F(NativeIndexTest, RefusesADamagedOrTruncatedIndex) {
  auto built = CatalogFromSpec(SampleSpec());
  const auto path = Write(*built);
  auto bytes = *ReadWholeFile(path);
  Patch(path, bytes.size() - 3, static_cast<char>(bytes[bytes.size() - 3] ^ 1));
  EXPECT_THAT(OpenError(path), HasSubstr("body checksum mismatch"));
  ASSERT_TRUE(
      WriteFileAtomically(path, bytes.substr(0, bytes.size() - 8), FileAccess::Shared()).ok());
  EXPECT_THAT(OpenError(path), HasSubstr("truncated"));
  ASSERT_TRUE(WriteFileAtomically(path, bytes, FileAccess::Shared()).ok());
  Patch(path, 8, static_cast<char>(kNativeIndexVersion + 1));  // the version field
  EXPECT_THAT(OpenError(path), HasSubstr("is newer than this gpufsd reads"));
  ASSERT_TRUE(WriteFileAtomically(path, bytes, FileAccess::Shared()).ok());
  Patch(path, 40, 9);  // inside the header, not a field that is checked before the checksum
  EXPECT_THAT(OpenError(path), HasSubstr("header checksum mismatch"));
}

TEST_F(NativeIndexTest, RefusesRecordsThatPointOutsideTheirTables) {
  auto built = CatalogFromSpec(SampleSpec());
  CatalogTables t = built->tables();
  std::vector<PackedExtent> extents(t.extents.begin(), t.extents.end());
  extents[1].group = 9;
  t.extents = extents;
  const auto path = Write(Catalog(t, nullptr));
  EXPECT_THAT(OpenError(path), HasSubstr("names a missing group"));

  t = built->tables();
  extents.assign(t.extents.begin(), t.extents.end());
  extents[0].offset = 25;  // runs past its 30-byte group
  t.extents = extents;
  EXPECT_THAT(OpenError(Write(Catalog(t, nullptr))), HasSubstr("outside its group"));

  t = built->tables();
  extents.assign(t.extents.begin(), t.extents.end());
  extents[0].size = kWideExtent;  // a wide record that is not there
  t.extents = extents;
  EXPECT_THAT(OpenError(Write(Catalog(t, nullptr))), HasSubstr("missing wide extent"));

  t = built->tables();
  std::vector<CatalogDir> dirs(t.dirs.begin(), t.dirs.end());
  dirs[0].dir_count = 1000;
  t.dirs = dirs;
  EXPECT_THAT(OpenError(Write(Catalog(t, nullptr))), HasSubstr("subfolders outside"));
}

// An index is untrusted even with valid checksums (anyone can compute them): each of these
// is written with correct checksums and must still be refused before anything is served.
class HostileIndexTest : public NativeIndexTest {
 protected:
  void SetUp() override {
    auto built = CatalogFromSpec(SampleSpec());
    ASSERT_TRUE(built.ok());
    base_ = std::make_unique<Catalog>(std::move(*built));
    dirs_.assign(base_->tables().dirs.begin(), base_->tables().dirs.end());
    names_ = std::string(base_->tables().names);
  }

  // The index with folder `id` renamed to `name`.
  std::string WithDirName(NodeId id, std::string_view name) {
    dirs_[id].name_offset = static_cast<uint32_t>(names_.size());
    dirs_[id].name_size = static_cast<uint32_t>(name.size());
    names_ += name;
    return ErrorOf(base_->tables().blobs);
  }

  // The index with the only file of folder `dir` renamed to `name`: its prefix is the whole
  // name.
  std::string WithOnlyFileName(NodeId dir, std::string_view name) {
    EXPECT_EQ(dirs_[dir].file_count, 1u);
    EXPECT_EQ(base_->Name(base_->FileNode(dirs_[dir].first_file)).rest, "");
    dirs_[dir].prefix_offset = static_cast<uint32_t>(names_.size());
    dirs_[dir].prefix_size = static_cast<uint32_t>(name.size());
    names_ += name;
    return ErrorOf(base_->tables().blobs);
  }

  std::string ErrorOf(std::vector<std::string> blobs) {
    CatalogTables t = base_->tables();
    t.dirs = dirs_;
    t.names = names_;
    t.blobs = std::move(blobs);
    return OpenError(Write(Catalog(t, nullptr)));
  }

  NodeId Id(std::string_view path) { return *base_->FindPath(path); }

  std::unique_ptr<Catalog> base_;
  std::vector<CatalogDir> dirs_;
  std::string names_;
};

TEST_F(HostileIndexTest, RefusesBlobNamesThatLeaveTheDatasetFolder) {
  for (const std::string bad : {"/etc/passwd", "../secret", "a/b", "", "..", "."}) {
    EXPECT_THAT(ErrorOf({bad, "blob-1"}), HasSubstr("blob name #0")) << bad;
  }
}

TEST_F(HostileIndexTest, RefusesNamesThatAreNotOneSegment) {
  for (const std::string& bad : {std::string("x/y"), std::string(".."), std::string("."),
                                 std::string(""), std::string("a\0b", 3), std::string("a\nb")}) {
    SetUp();
    EXPECT_THAT(WithOnlyFileName(Id("train/cat"), bad), HasSubstr("is invalid")) << bad;
    SetUp();
    EXPECT_THAT(WithDirName(Id("train/cat"), bad), HasSubstr("is invalid")) << bad;
  }
}

TEST_F(HostileIndexTest, RefusesChildrenOutOfOrderOrRepeated) {
  // "val" renamed "a" sorts before its sibling "train": lookups would miss it.
  EXPECT_THAT(WithDirName(Id("val"), "a"), HasSubstr("not sorted and unique"));
  SetUp();
  EXPECT_THAT(WithDirName(Id("val"), "train"), HasSubstr("not sorted and unique"));
}

TEST_F(HostileIndexTest, RefusesAFolderOutsideItsParentsRun) {
  const NodeId cat = Id("train/cat");
  dirs_[cat].parent = 4000;  // out of range: PathOf would read past the table
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr(fmt::format("folder {} is", cat)));
  SetUp();
  dirs_[0].dir_count -= 1;  // the last top folder is listed by nobody
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr("is not among the subfolders"));
  SetUp();
  dirs_[Id("val")].first_dir = dirs_[Id("train")].first_dir;  // lists train's subfolders
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr("listed under the wrong folder"));
  SetUp();
  dirs_[Id("val/cat")].first_file = 0;  // two names, one record
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr("outside its run of the file table"));
}

// A listing of the root stats its '..', the root's parent: beyond the tables it would read
// another file's extent from outside the mapping; a folder or a file would be a wrong '..'.
TEST_F(HostileIndexTest, RefusesARootWhoseParentIsNotItself) {
  const uint32_t folders = static_cast<uint32_t>(dirs_.size());
  for (const uint32_t parent : {4000u, 1u, folders, folders + 2}) {
    SetUp();
    dirs_[0].parent = parent;
    const std::string error = ErrorOf(base_->tables().blobs);
    EXPECT_THAT(error, HasSubstr((dir_.path() / "index.gpufs").string())) << parent;
    EXPECT_THAT(error, HasSubstr(fmt::format("the root names folder {} as its parent", parent)))
        << parent;
  }
}

}  // namespace
}  // namespace gpufs
