// Fuzzes the native index opener, OpenNativeIndex, on an index whose checksums are right.
//
// Both checksums and the file size in the header are recomputed over the fuzzed bytes
// before the open. Otherwise nearly every mutation would be refused at the checksum, and
// the checks behind it would never run; and a checksum proves nothing about who wrote the
// index, so the opener must refuse a malicious index that carries valid ones. What it
// accepts must be servable (catalog_invariants.h), and is then served as a mount serves
// it: the filesystem core lists every folder, stats every file and reads every extended
// attribute (fs/served_tree.h), so a field the opener leaves unchecked and a listing or a
// stat reads is found here, not by a daemon that crashes when a client gets there.
#include <fcntl.h>
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dataset/format/native_index.h"
#include "fs/filesystem.h"
#include "fs/served_tree.h"
#include "tests/fuzz/catalog_invariants.h"
#include "tests/fuzz/mem_file.h"

namespace gpufs::fuzz {
namespace {

// The header fields rewritten here, at their offsets in native_index.cc's header: 240
// bytes (eleven sections), ending with its own checksum.
constexpr size_t kHeaderSize = 240;
constexpr size_t kFileSizeAt = 16;
constexpr size_t kBodyChecksumAt = 24;

void Put64(std::vector<uint8_t>& bytes, size_t at, uint64_t value) {
  std::memcpy(bytes.data() + at, &value, sizeof(value));
}

// Makes the header's file size and both checksums agree with `bytes`.
void Reseal(std::vector<uint8_t>& bytes) {
  const size_t header_size = kHeaderSize;
  if (bytes.size() < header_size) return;
  const size_t header_checksum_at = header_size - 8;
  Put64(bytes, kFileSizeAt, bytes.size());
  Put64(bytes, kBodyChecksumAt,
        XXH3_64bits(bytes.data() + header_size, bytes.size() - header_size));
  Put64(bytes, header_checksum_at, 0);
  Put64(bytes, header_checksum_at, XXH3_64bits(bytes.data(), header_size));
}

void CheckOpened(const OpenedIndex& opened) {
  std::vector<uint64_t> blob_sizes;
  for (const BlobInfo& b : opened.info.blobs) blob_sizes.push_back(b.size);
  Require(blob_sizes.size() == opened.catalog.blobs().size(),
          "the index has not one size per blob");
  CheckCatalog(opened.catalog, blob_sizes);
  const auto& t = opened.catalog.tables();
  Require(t.sha256.empty() || t.sha256.size() == t.file_count(),
          "the index has digests for some files only");
}

// Blobs with names and no bytes: the walk reads none, and user.gpufs.blob asks only the
// name.
class NoBytes : public BlobSource {
 public:
  explicit NoBytes(size_t blobs) : blobs_(blobs) {}
  std::string_view kind() const override { return "none"; }
  size_t blob_count() const override { return blobs_; }
  std::string Describe(uint32_t blob) const override { return "blob-" + std::to_string(blob); }
  const BlobInfo* Expected(uint32_t) const override { return nullptr; }
  void Submit(ReadKind, std::vector<BlobRead> reads) override {
    for (BlobRead& r : reads) r.done(Fail(EIO, "cannot read blob {}: it has no bytes", r.blob));
  }
  nlohmann::json Stats() const override { return nlohmann::json::object(); }

 private:
  size_t blobs_;
};

void CheckServed(const OpenedIndex& opened) {
  NoBytes source(opened.catalog.blobs().size());
  const Filesystem fs(opened.catalog, source, ServeOptions{});
  const Status served = CheckServedTree(fs, "the fuzzed index");
  if (!served) {
    std::fprintf(stderr, "%s\n", served.error().message.c_str());
    Broken("the filesystem core serves an accepted index wrongly", 0);
  }
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufs;
  static fuzz::MemFile file("index.gpufs");
  std::vector<uint8_t> bytes(data, data + size);
  fuzz::Reseal(bytes);
  file.Assign(bytes.data(), bytes.size());
  // OpenNativeIndex refuses a symbolic link, which /proc/self/fd/N is: the opener behind it
  // is given a descriptor of the memfd, as it would be one of a file on disk.
  const int fd = open(file.path().c_str(), O_RDONLY | O_CLOEXEC);
  fuzz::Require(fd >= 0, "cannot open the memfd again");
  auto opened = OpenNativeIndexFd(fd, "index.gpufs");
  if (!opened) return 0;
  fuzz::CheckOpened(*opened);
  fuzz::CheckServed(*opened);
  return 0;
}
