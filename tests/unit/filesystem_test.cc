#include "fs/filesystem.h"

#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "dataset/format/mytar.h"
#include "dataset/open/open_dataset.h"
#include "source/local_source.h"
#include "tests/unit/fake_source.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

// A two-group dataset on disk, mounted in-process through the core only.
class FilesystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Write("filegroup-0.mytar",
          "HELLO-WORLD!"
          "tiny");
    Write("filegroup-1.mytar", "0123456789");
    Write("metadata.txt",
          "2\ncat\ndog\n"
          "filegroup-0.mytar,2\n0,cat,0,12,/d/cat/sub/hello.jpg\n1,dog,12,4,/d/dog/tiny.jpg\n"
          "filegroup-1.mytar,1\n0,dog,0,10,/d/dog/digits.jpg\n");
    auto spec = ReadMytarDataset(dir_.path());
    ASSERT_TRUE(spec.ok()) << spec.error().message;
    auto catalog = CatalogFromSpec(*spec);
    ASSERT_TRUE(catalog.ok()) << catalog.error().message;
    catalog_ = std::make_unique<Catalog>(std::move(*catalog));
    blobs_ = std::make_unique<BlobFiles>(dir_.path(), catalog_->blobs());
    source_ = std::make_unique<LocalSource>(*blobs_, engine_);
    Serve(false);
  }

  void Serve(bool verify) { ServeFrom(*source_, verify); }

  void ServeFrom(BlobSource& source, bool verify) {
    fs_ = std::make_unique<Filesystem>(*catalog_, source,
                                       ServeOptions{Owner{123, 456},
                                                    timespec{1700000000, 5},
                                                    dir_.path().string(),
                                                    "mytar",
                                                    verify,
                                                    {},
                                                    {}});
  }

  void Write(const std::string& name, std::string_view bytes) {
    std::ofstream(dir_.path() / name, std::ios::binary) << bytes;
  }

  uint64_t InoOf(std::string_view path) { return Filesystem::InoOf(*catalog_->FindPath(path)); }

  // What a reader gets: the bytes the daemon would reply with.
  std::string ReadAll(uint64_t ino, uint64_t offset, size_t size) {
    auto bytes = fs_->Fetch(ino, offset, size);
    EXPECT_TRUE(bytes.ok()) << bytes.error().message;
    return bytes.ok() ? std::string(bytes->data(), bytes->size()) : "";
  }

  TempDir dir_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<BlobFiles> blobs_;
  PreadEngine engine_{1};
  std::unique_ptr<LocalSource> source_;
  std::unique_ptr<Filesystem> fs_;
};

TEST_F(FilesystemTest, LooksUpNamesFromTheRoot) {
  auto cat = fs_->Lookup(Filesystem::kRootIno, "cat");
  ASSERT_TRUE(cat.ok());
  EXPECT_TRUE(S_ISDIR(cat->attr.st_mode));
  auto sub = fs_->Lookup(cat->ino, "sub");
  ASSERT_TRUE(sub.ok());
  auto hello = fs_->Lookup(sub->ino, "hello.jpg");
  ASSERT_TRUE(hello.ok());
  EXPECT_EQ(hello->attr.st_size, 12);
  EXPECT_EQ(fs_->Lookup(cat->ino, "nope").error().code, ENOENT);
  EXPECT_EQ(fs_->Lookup(hello->ino, "x").error().code, ENOTDIR);
  EXPECT_EQ(fs_->Lookup(999, "x").error().code, ENOENT);
}

TEST_F(FilesystemTest, ReportsReadOnlyAttributesOwnedByTheMounter) {
  auto attr = fs_->GetAttr(InoOf("dog/digits.jpg"));
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->st_mode, S_IFREG | 0444);
  EXPECT_EQ(attr->st_uid, 123u);
  EXPECT_EQ(attr->st_gid, 456u);
  EXPECT_EQ(attr->st_size, 10);
  EXPECT_EQ(attr->st_nlink, 1u);
  EXPECT_EQ(attr->st_mtim.tv_sec, 1700000000);
  auto root = fs_->GetAttr(Filesystem::kRootIno);
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->st_mode, S_IFDIR | 0555);
  EXPECT_EQ(root->st_nlink, 4u);  // ".", its entry in the parent, and two class folders
  EXPECT_EQ(fs_->GetAttr(0).error().code, ENOENT);
}

TEST_F(FilesystemTest, ReadsBehaveLikeARegularFile) {
  const uint64_t hello = InoOf("cat/sub/hello.jpg");
  EXPECT_EQ(ReadAll(hello, 0, 100), "HELLO-WORLD!");
  EXPECT_EQ(ReadAll(hello, 6, 3), "WOR");
  EXPECT_EQ(ReadAll(hello, 11, 100), "!");
  EXPECT_EQ(ReadAll(hello, 12, 10), "");
  EXPECT_EQ(ReadAll(hello, 1u << 30, 10), "");
  EXPECT_EQ(ReadAll(InoOf("dog/tiny.jpg"), 0, 4096), "tiny");
  EXPECT_EQ(ReadAll(InoOf("dog/digits.jpg"), 3, 4), "3456");
  EXPECT_EQ(fs_->Fetch(InoOf("cat"), 0, 4).error().code, EISDIR);
}

TEST_F(FilesystemTest, FetchesWholeRangesWithoutACache) {
  auto bytes = fs_->Fetch(InoOf("dog/tiny.jpg"), 1, 100);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(std::string(bytes->data(), bytes->size()), "iny");
  EXPECT_EQ(fs_->Fetch(InoOf("dog/tiny.jpg"), 4, 1)->size(), 0u);
  // A blob that ends inside the range fails the read; it never comes back short.
  truncate((dir_.path() / "filegroup-0.mytar").c_str(), 14);
  auto cut = fs_->Fetch(InoOf("dog/tiny.jpg"), 0, 100);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.error().code, EIO);
}

TEST_F(FilesystemTest, ReportsAShortBlobAsAnIoError) {
  truncate((dir_.path() / "filegroup-1.mytar").c_str(), 5);
  auto n = fs_->Fetch(InoOf("dog/digits.jpg"), 0, 10);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.error().code, EIO);
  EXPECT_THAT(n.error().message, ::testing::HasSubstr("filegroup-1.mytar ends early"));
}

TEST_F(FilesystemTest, ListsFoldersWithDotsAndResumesAtAnOffset) {
  std::vector<std::string> names;
  std::vector<uint64_t> offsets;
  auto collect = [&](const DirEntry& e) {
    names.emplace_back(e.name);
    offsets.push_back(e.next_offset);
    return true;
  };
  ASSERT_TRUE(fs_->ReadDir(InoOf("dog"), 0, collect).ok());
  EXPECT_THAT(names, ::testing::ElementsAre(".", "..", "digits.jpg", "tiny.jpg"));
  names.clear();
  ASSERT_TRUE(fs_->ReadDir(InoOf("dog"), offsets[2], collect).ok());
  EXPECT_THAT(names, ::testing::ElementsAre("tiny.jpg"));
  names.clear();
  int budget = 1;
  ASSERT_TRUE(fs_->ReadDir(Filesystem::kRootIno, 0,
                           [&](const DirEntry& e) {
                             names.emplace_back(e.name);
                             return --budget >= 0;
                           })
                  .ok());
  EXPECT_EQ(names.size(), 2u);  // the second entry did not fit and stops the listing
  EXPECT_EQ(fs_->ReadDir(InoOf("dog/tiny.jpg"), 0, collect).error().code, ENOTDIR);
}

TEST_F(FilesystemTest, RefusesWritesAndOpeningFoldersAsFiles) {
  const uint64_t tiny = InoOf("dog/tiny.jpg");
  EXPECT_TRUE(fs_->Open(tiny, O_RDONLY).ok());
  EXPECT_EQ(fs_->Open(tiny, O_WRONLY).error().code, EROFS);
  EXPECT_EQ(fs_->Open(tiny, O_RDWR).error().code, EROFS);
  EXPECT_EQ(fs_->Open(tiny, O_RDONLY | O_TRUNC).error().code, EROFS);
  EXPECT_EQ(fs_->Open(InoOf("dog"), O_RDONLY).error().code, EISDIR);
  EXPECT_TRUE(fs_->OpenDir(InoOf("dog")).ok());
  EXPECT_EQ(fs_->OpenDir(tiny).error().code, ENOTDIR);
}

TEST_F(FilesystemTest, TellsEachFileItsGroupAndOffset) {
  const uint64_t tiny = InoOf("dog/tiny.jpg");
  EXPECT_EQ(*fs_->GetXattr(tiny, "user.gpufs.group"), "0");
  EXPECT_EQ(*fs_->GetXattr(tiny, "user.gpufs.offset"), "12");
  EXPECT_EQ(*fs_->GetXattr(tiny, "user.gpufs.size"), "4");
  EXPECT_EQ(*fs_->GetXattr(tiny, "user.gpufs.class"), "dog");
  EXPECT_EQ(*fs_->GetXattr(tiny, "user.gpufs.blob"), (dir_.path() / "filegroup-0.mytar").string());
  EXPECT_EQ(fs_->GetXattr(tiny, "user.other").error().code, ENODATA);
  EXPECT_EQ(fs_->GetXattr(InoOf("dog"), "user.gpufs.group").error().code, ENODATA);
  EXPECT_EQ(*fs_->GetXattr(Filesystem::kRootIno, "user.gpufs.pid"), std::to_string(getpid()));
  EXPECT_EQ(*fs_->GetXattr(Filesystem::kRootIno, "user.gpufs.format"), "mytar");
  const std::string root_list = *fs_->ListXattr(Filesystem::kRootIno);
  EXPECT_EQ(std::count(root_list.begin(), root_list.end(), '\0'),
            5);  // pid, source, format, inodes, stats
  EXPECT_EQ(
      nlohmann::json::parse(*fs_->GetXattr(Filesystem::kRootIno, "user.gpufs.stats"))["io"]["kind"],
      "local");
  fs_->Remember(tiny, 5);
  fs_->Remember(InoOf("dog"));
  fs_->Forget(tiny, 3);
  EXPECT_EQ(*fs_->GetXattr(Filesystem::kRootIno, "user.gpufs.inodes"), "3");
  EXPECT_TRUE(fs_->KernelKnows(*catalog_->FindPath("dog/tiny.jpg")));
  fs_->Forget(tiny, 2);
  EXPECT_FALSE(fs_->KernelKnows(*catalog_->FindPath("dog/tiny.jpg")));
  EXPECT_TRUE(fs_->KernelKnows(*catalog_->FindPath("dog")));
  const std::string list = *fs_->ListXattr(tiny);
  EXPECT_EQ(std::count(list.begin(), list.end(), '\0'), 5);
  EXPECT_EQ(fs_->ListXattr(InoOf("dog"))->size(), 0u);
}

TEST_F(FilesystemTest, VerifyRefusesADamagedMemberOnItsFirstRead) {
  std::vector<uint64_t> sums(catalog_->file_count());
  for (NodeId id = 0; id < catalog_->node_count(); ++id) {
    if (catalog_->IsDir(id)) continue;
    const std::string bytes = ReadAll(Filesystem::InoOf(id), 0, 1 << 20);
    sums[catalog_->FileIndex(id)] = ChecksumOf(bytes.data(), bytes.size());
  }
  *catalog_ = WithFileChecksums(*catalog_, sums);
  Write("filegroup-0.mytar",
        "HELLO-WORLD?"
        "tiny");  // damages hello.jpg only
  Serve(true);
  auto hello = fs_->Fetch(InoOf("cat/sub/hello.jpg"), 0, 16);
  ASSERT_FALSE(hello.ok());
  EXPECT_EQ(hello.error().code, EIO);
  EXPECT_THAT(hello.error().message, ::testing::HasSubstr("cat/sub/hello.jpg"));
  EXPECT_EQ(ReadAll(InoOf("dog/tiny.jpg"), 0, 4), "tiny");
  EXPECT_FALSE(fs_->Fetch(InoOf("cat/sub/hello.jpg"), 0, 4).ok());
}

TEST_F(FilesystemTest, ReportsTotalsInStatFs) {
  const struct statvfs st = fs_->StatFs();
  EXPECT_EQ(st.f_files, catalog_->node_count());
  EXPECT_EQ(st.f_blocks, 1u);  // 26 bytes round up to one 4 KiB block
  EXPECT_EQ(st.f_bfree, 0u);
  EXPECT_EQ(st.f_namemax, 255u);
}

// The core reads through the blob source alone: what the fake holds is what is served.
TEST_F(FilesystemTest, ServesWhateverTheBlobSourceHolds) {
  FakeSource fake({"hello-world!TINY", "ABCDEFGHIJ"});
  ServeFrom(fake, false);
  EXPECT_EQ(ReadAll(InoOf("cat/sub/hello.jpg"), 0, 100), "hello-world!");
  EXPECT_EQ(ReadAll(InoOf("dog/digits.jpg"), 2, 3), "CDE");
  ASSERT_EQ(fake.calls().size(), 2u);
  EXPECT_EQ(fake.calls()[1].kind, ReadKind::kMember);
  EXPECT_EQ(fake.calls()[1].offset, 2u);
  fake.Fail(1, ECONNREFUSED);
  auto failed = fs_->Fetch(InoOf("dog/digits.jpg"), 0, 10);
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.error().message, ::testing::HasSubstr("fake://1"));
}

// --verify checks the bytes it serves: one read of the whole member, never a second.
TEST_F(FilesystemTest, VerifyChecksTheBytesItServesWithOneRead) {
  FakeSource fake({"HELLO-WORLD!tiny", "0123456789"});
  std::vector<uint64_t> by_index(catalog_->file_count());
  for (NodeId id = 0; id < catalog_->node_count(); ++id) {
    if (catalog_->IsDir(id)) continue;
    const FileExtent& f = catalog_->Extent(id);
    const size_t blob = catalog_->Group(f.group).blob;
    by_index[catalog_->FileIndex(id)] = ChecksumOf(fake.blob(blob).data() + f.offset, f.size);
  }
  *catalog_ = WithFileChecksums(*catalog_, by_index);
  ServeFrom(fake, true);
  EXPECT_EQ(ReadAll(InoOf("dog/digits.jpg"), 4, 2), "45");
  ASSERT_EQ(fake.calls().size(), 1u);
  EXPECT_EQ(fake.calls()[0].offset, 0u);  // the whole member, checked, then the range served
  EXPECT_EQ(fake.calls()[0].length, 10u);
  EXPECT_EQ(ReadAll(InoOf("dog/digits.jpg"), 8, 5), "89");
  ASSERT_EQ(fake.calls().size(), 2u);  // verified once: now just the range
  EXPECT_EQ(fake.calls()[1].length, 2u);
  fake.blob(0)[1] = 'e';  // damages hello.jpg before its first read
  auto hello = fs_->Fetch(InoOf("cat/sub/hello.jpg"), 0, 4);
  ASSERT_FALSE(hello.ok());
  EXPECT_EQ(hello.error().code, EIO);
  EXPECT_EQ(fake.calls().size(), 3u);
}

}  // namespace
}  // namespace gpufs
