#include "dataset/format/native_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "dataset/format/checksums.h"
#include "dataset/format/file_io.h"
#include "dataset/format/open_dataset.h"
#include "dataset/format/reindex.h"
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
  auto built = Catalog::FromSpec(SampleSpec());
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
  EXPECT_EQ(c.Extent(*b).checksum, 222u);
  EXPECT_EQ(c.Extent(*b).class_id, 1u);
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

TEST_F(NativeIndexTest, RoundTripsSha256DigestsAsVersion2) {
  DatasetSpec spec = SampleSpec();
  spec.has_sha256 = true;
  for (size_t i = 0; i < spec.members.size(); ++i) {
    const std::string bytes(10 + i, static_cast<char>('a' + i));
    spec.members[i].sha256 = Sha256Of(bytes.data(), bytes.size());
  }
  auto built = Catalog::FromSpec(spec);
  ASSERT_TRUE(built.ok()) << built.error().message;
  const auto path = Write(*built);
  EXPECT_EQ(VersionOf(path), 2u);
  auto opened = OpenNativeIndex(path);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  const Catalog& c = opened->catalog;
  ASSERT_TRUE(c.has_sha256());
  EXPECT_TRUE(c.has_checksums());
  for (const MemberSpec& m : spec.members) {
    const NodeId id = *c.FindPath(m.path);
    ASSERT_NE(c.Sha256(c.FileIndex(id)), nullptr);
    EXPECT_EQ(*c.Sha256(c.FileIndex(id)), m.sha256) << m.path;
    EXPECT_EQ(c.Extent(id).checksum, m.checksum);
  }
  EXPECT_EQ(opened->info.blobs[1].checksum, 88u);
}

// Indexes without digests (a tar's, an old pack's) stay readable by older daemons.
TEST_F(NativeIndexTest, WritesAndOpensVersion1WithoutDigests) {
  auto built = Catalog::FromSpec(SampleSpec());
  const auto path = Write(*built);
  EXPECT_EQ(VersionOf(path), 1u);
  auto opened = OpenNativeIndex(path);
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_FALSE(opened->catalog.has_sha256());
  EXPECT_EQ(opened->catalog.Sha256(0), nullptr);
  EXPECT_EQ(opened->catalog.file_count(), 3u);
}

TEST_F(NativeIndexTest, RefusesDigestsThatDoNotMatchTheFileTable) {
  DatasetSpec spec = SampleSpec();
  spec.has_sha256 = true;
  auto built = Catalog::FromSpec(spec);
  CatalogTables t = built->tables();
  t.sha256 = t.sha256.first(2);
  EXPECT_FALSE(WriteNativeIndex(Catalog(t, nullptr), IndexInfo{{}, 0, {{30, 0}, {20, 0}}},
                                dir_.path() / "index.gpufs", FileAccess::Shared())
                   .ok());
}

// A version 1 pack as an older gpufsd wrote it: real blobs, XXH3 checksums, no digests.
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
    auto built = Catalog::FromSpec(spec_);
    IndexInfo info;
    info.blobs = {BlobInfo{30, ChecksumOf(blob0.data(), 30)},
                  BlobInfo{20, ChecksumOf(blob1.data(), 20)}};
    ASSERT_TRUE(
        WriteNativeIndex(*built, info, dir_.path() / "index.gpufs", FileAccess::Shared()).ok());
    ASSERT_EQ(VersionOf(dir_.path() / "index.gpufs"), 1u);
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
  EXPECT_EQ(VersionOf(dir_.path() / "index.gpufs"), 2u);
  EXPECT_EQ(std::filesystem::last_write_time(dir_.path() / "blob-0"), blob_time);
  auto opened = OpenDataset(dir_.path(), OpenOptions{});
  ASSERT_TRUE(opened.ok()) << opened.error().message;
  EXPECT_EQ(opened->format, "native");
  const Catalog& c = opened->catalog;
  ASSERT_TRUE(c.has_sha256());
  for (size_t i = 0; i < spec_.members.size(); ++i) {
    const NodeId id = *c.FindPath(spec_.members[i].path);
    EXPECT_EQ(*c.Sha256(c.FileIndex(id)), Sha256Of(bytes_[i].data(), bytes_[i].size()));
    EXPECT_EQ(c.Extent(id).checksum, spec_.members[i].checksum);
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
  EXPECT_EQ(VersionOf(dir_.path() / "index.gpufs"), 1u);
}

TEST_F(NativeIndexTest, WritesIdenticalBytesForIdenticalInput) {
  auto a = Catalog::FromSpec(SampleSpec());
  auto b = Catalog::FromSpec(SampleSpec());
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
  auto built = Catalog::FromSpec(SampleSpec());
  const auto path = Write(*built);
  auto bytes = *ReadWholeFile(path);
  Patch(path, bytes.size() - 3, static_cast<char>(bytes[bytes.size() - 3] ^ 1));
  EXPECT_THAT(OpenError(path), HasSubstr("body checksum mismatch"));
  ASSERT_TRUE(
      WriteFileAtomically(path, bytes.substr(0, bytes.size() - 8), FileAccess::Shared()).ok());
  EXPECT_THAT(OpenError(path), HasSubstr("truncated"));
  ASSERT_TRUE(WriteFileAtomically(path, bytes, FileAccess::Shared()).ok());
  Patch(path, 8, 3);  // the version field
  EXPECT_THAT(OpenError(path), HasSubstr("version 3 is not supported"));
  ASSERT_TRUE(WriteFileAtomically(path, bytes, FileAccess::Shared()).ok());
  Patch(path, 40, 9);  // inside the header, not a field that is checked before the checksum
  EXPECT_THAT(OpenError(path), HasSubstr("header checksum mismatch"));
}

TEST_F(NativeIndexTest, RefusesRecordsThatPointOutsideTheirTables) {
  auto built = Catalog::FromSpec(SampleSpec());
  CatalogTables t = built->tables();
  std::vector<FileExtent> files(t.files.begin(), t.files.end());
  files[1].group = 9;
  t.files = files;
  const auto path = Write(Catalog(t, nullptr));
  EXPECT_THAT(OpenError(path), HasSubstr("names a missing group"));

  t = built->tables();
  files.assign(t.files.begin(), t.files.end());
  files[0].offset = 25;  // runs past its 30-byte group
  t.files = files;
  EXPECT_THAT(OpenError(Write(Catalog(t, nullptr))), HasSubstr("outside its group"));

  t = built->tables();
  std::vector<CatalogNode> nodes(t.nodes.begin(), t.nodes.end());
  nodes[0].count = 1000;
  t.nodes = nodes;
  EXPECT_THAT(OpenError(Write(Catalog(t, nullptr))), HasSubstr("children outside"));
}

// An index is untrusted even with valid checksums (anyone can compute them): each of these
// is written with correct checksums and must still be refused before anything is served.
class HostileIndexTest : public NativeIndexTest {
 protected:
  void SetUp() override {
    auto built = Catalog::FromSpec(SampleSpec());
    ASSERT_TRUE(built.ok());
    base_ = std::make_unique<Catalog>(std::move(*built));
    nodes_.assign(base_->tables().nodes.begin(), base_->tables().nodes.end());
    names_ = std::string(base_->tables().names);
  }

  // The index with node `id` renamed to `name`.
  std::string WithNodeName(NodeId id, std::string_view name) {
    nodes_[id].name_offset = static_cast<uint32_t>(names_.size());
    nodes_[id].name_size = static_cast<uint16_t>(name.size());
    names_ += name;
    return ErrorOf(base_->tables().blobs);
  }

  std::string ErrorOf(std::vector<std::string> blobs) {
    CatalogTables t = base_->tables();
    t.nodes = nodes_;
    t.names = names_;
    t.blobs = std::move(blobs);
    return OpenError(Write(Catalog(t, nullptr)));
  }

  NodeId Id(std::string_view path) { return *base_->FindPath(path); }

  std::unique_ptr<Catalog> base_;
  std::vector<CatalogNode> nodes_;
  std::string names_;
};

TEST_F(HostileIndexTest, RefusesBlobNamesThatLeaveTheDatasetFolder) {
  for (const std::string bad : {"/etc/passwd", "../secret", "a/b", "", "..", "."}) {
    EXPECT_THAT(ErrorOf({bad, "blob-1"}), HasSubstr("blob name #0")) << bad;
  }
}

TEST_F(HostileIndexTest, RefusesNodeNamesThatAreNotOneSegment) {
  const NodeId file = Id("train/cat/a.jpg");
  for (const std::string& bad : {std::string("x/y"), std::string(".."), std::string("."),
                                 std::string(""), std::string("a\0b", 3), std::string("a\nb")}) {
    SetUp();
    EXPECT_THAT(WithNodeName(file, bad), HasSubstr("is invalid")) << bad;
  }
}

TEST_F(HostileIndexTest, RefusesChildrenOutOfOrderOrRepeated) {
  // "val" renamed "a" sorts before its sibling "train": lookups would miss it.
  EXPECT_THAT(WithNodeName(Id("val"), "a"), HasSubstr("not sorted and unique"));
  SetUp();
  EXPECT_THAT(WithNodeName(Id("val"), "train"), HasSubstr("not sorted and unique"));
}

TEST_F(HostileIndexTest, RefusesANodeOutsideItsParentsChildren) {
  const NodeId file = Id("train/cat/a.jpg");
  nodes_[file].parent = 4000;  // out of range: PathOf would read past the table
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr(fmt::format("node {} is", file)));
  SetUp();
  nodes_[0].count -= 1;  // the last top folder is listed by nobody
  nodes_[0].subdirs -= 1;
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr("is not among the children"));
  SetUp();
  nodes_[file].parent = Id("val/dog");  // a folder, but not the one listing it
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr("listed under the wrong folder"));
  SetUp();
  nodes_[Id("val/cat/\xc3\xa9.jpg")].first = nodes_[file].first;  // two names, one record
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr("which another node names"));
  SetUp();
  nodes_[Id("train")].subdirs = 7;  // st_nlink would lie
  EXPECT_THAT(ErrorOf(base_->tables().blobs), HasSubstr("subfolders"));
}

}  // namespace
}  // namespace gpufs
