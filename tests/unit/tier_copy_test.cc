// A disk tier copy's file format, directly: the header's layout and fields, the block sums
// it carries, and what ReadCopyHeader refuses, with its reason.
#include "cache/tier/tier_copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "dataset/format/checksums.h"
#include "tests/unit/temp_dir.h"

namespace gpufs {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBlock = 16 << 10;
const std::string kName = "g000003-0123456789abcdef.grp";

// Offsets of the fixed header's fields (tier_copy.cc): magic, version, header bytes,
// payload, block bytes, name bytes; the name follows at 32.
constexpr size_t kVersionAt = 8;
constexpr size_t kHeaderBytesAt = 12;
constexpr size_t kPayloadAt = 16;
constexpr size_t kBlockBytesAt = 24;
constexpr size_t kNameBytesAt = 28;
constexpr size_t kNameAt = 32;

std::string Payload(size_t bytes, char seed) {
  std::string p(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<char>(seed + i * 13 % 251);
  return p;
}

template <typename T>
T FieldAt(const char* header, size_t at) {
  T value{};
  std::memcpy(&value, header + at, sizeof(value));
  return value;
}

class TierCopyTest : public ::testing::Test {
 protected:
  ~TierCopyTest() override {
    if (fd_ >= 0) close(fd_);
  }

  // Writes a copy (header, then payload) of `payload` named `name` to a file, and leaves
  // it open for reading at fd_. Returns the header's length.
  size_t WriteCopy(const std::string& name, const std::string& payload, size_t block = kBlock) {
    const size_t header_bytes = HeaderBytes(name.size(), payload.size(), block);
    AlignedBuffer header = MakeCopyHeader(name, payload.data(), payload.size(), block);
    EXPECT_NE(header, nullptr);
    header_.assign(header.get(), header_bytes);
    Rewrite();
    EXPECT_TRUE(WriteFully(fd_, payload.data(), payload.size(), header_bytes));
    return header_bytes;
  }

  // Puts header_ (as the test changed it) back over the copy's header.
  void Rewrite() {
    if (fd_ < 0) fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd_, 0);
    ASSERT_TRUE(WriteFully(fd_, header_.data(), header_.size(), 0));
  }

  template <typename T>
  void Patch(size_t at, T value) {
    std::memcpy(header_.data() + at, &value, sizeof(value));
    Rewrite();
  }

  std::string Refusal(const std::string& name, size_t length) {
    auto header = ReadCopyHeader(fd_, name, length);
    return header ? "accepted" : header.error().message;
  }

  TempDir dir_;
  fs::path path_ = dir_.path() / kName;
  int fd_ = -1;
  std::string header_;
};

TEST(TierCopy, BlocksCoverThePayloadAndTheHeaderIsPaddedToThePage) {
  EXPECT_EQ(BlockCount(0, kBlock), 0u);
  EXPECT_EQ(BlockCount(1, kBlock), 1u);
  EXPECT_EQ(BlockCount(kBlock, kBlock), 1u);
  EXPECT_EQ(BlockCount(kBlock + 1, kBlock), 2u);
  EXPECT_EQ(BlockCount(300'000, kBlock), 19u);
  // 32 fixed bytes, a 10-byte name padded to 16, 19 sums of 8 bytes: one page.
  EXPECT_EQ(HeaderBytes(10, 300'000, kBlock), kCopyAlign);
  // 600 sums pass a page: two.
  EXPECT_EQ(HeaderBytes(10, 600 * 4096, 4096), 2 * kCopyAlign);
  // Exactly a page: 32 + 16 + 8 * 506 = 4096.
  EXPECT_EQ(HeaderBytes(10, 506 * 4096, 4096), kCopyAlign);
  EXPECT_EQ(HeaderBytes(10, 507 * 4096, 4096), 2 * kCopyAlign);
  EXPECT_EQ(RoundUp(1, kCopyAlign), kCopyAlign);
  EXPECT_EQ(RoundUp(kCopyAlign, kCopyAlign), kCopyAlign);
  EXPECT_EQ(RoundUp(0, kCopyAlign), 0u);
}

TEST(TierCopy, AlignedBuffersSuitDirectIo) {
  for (size_t pages : {1, 3, 256}) {
    AlignedBuffer b = Aligned(pages * kCopyAlign);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % kCopyAlign, 0u) << pages;
  }
}

TEST(TierCopy, ABlocksChecksumIsThatOfItsBytesTheLastOneShort) {
  const std::string payload = Payload(2 * kBlock + 100, 'a');
  EXPECT_EQ(BlockChecksum(payload.data(), payload.size(), 0, kBlock),
            ChecksumOf(payload.data(), kBlock));
  EXPECT_EQ(BlockChecksum(payload.data(), payload.size(), 1, kBlock),
            ChecksumOf(payload.data() + kBlock, kBlock));
  EXPECT_EQ(BlockChecksum(payload.data(), payload.size(), 2, kBlock),
            ChecksumOf(payload.data() + 2 * kBlock, 100));
  EXPECT_NE(BlockChecksum(payload.data(), payload.size(), 0, kBlock),
            BlockChecksum(payload.data(), payload.size(), 1, kBlock));
}

TEST(TierCopy, TheHeadersFieldsAreLaidOutAsTheFormatSays) {
  const std::string payload = Payload(40'000, 'h');
  const size_t header_bytes = HeaderBytes(kName.size(), payload.size(), kBlock);
  AlignedBuffer header = MakeCopyHeader(kName, payload.data(), payload.size(), kBlock);
  const char* h = header.get();
  EXPECT_EQ(std::string(h, 8), "GPUFSDT\n");
  EXPECT_EQ(FieldAt<uint32_t>(h, kVersionAt), kCopyVersion);
  EXPECT_EQ(FieldAt<uint32_t>(h, kHeaderBytesAt), header_bytes);
  EXPECT_EQ(FieldAt<uint64_t>(h, kPayloadAt), payload.size());
  EXPECT_EQ(FieldAt<uint32_t>(h, kBlockBytesAt), kBlock);
  EXPECT_EQ(FieldAt<uint32_t>(h, kNameBytesAt), kName.size());
  EXPECT_EQ(std::string(h + kNameAt, kName.size()), kName);
  const size_t sums = kNameAt + RoundUp(kName.size(), 8);
  for (size_t i = kNameAt + kName.size(); i < sums; ++i) EXPECT_EQ(h[i], 0) << i;
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(FieldAt<uint64_t>(h, sums + 8 * b),
              BlockChecksum(payload.data(), payload.size(), b, kBlock))
        << "block " << b;
  }
  for (size_t i = sums + 3 * 8; i < header_bytes; ++i) ASSERT_EQ(h[i], 0) << i;
}

TEST_F(TierCopyTest, ACopyReadsBackWithItsHeaderAndEveryBlockMatches) {
  const std::string payload = Payload(300'000, 'r');
  const size_t header_bytes = WriteCopy(kName, payload);
  auto header = ReadCopyHeader(fd_, kName, payload.size());
  ASSERT_TRUE(header.ok()) << header.error().message;
  EXPECT_EQ(header->payload, payload.size());
  EXPECT_EQ(header->header_bytes, header_bytes);
  EXPECT_EQ(header->block_bytes, kBlock);
  ASSERT_EQ(header->blocks.size(), BlockCount(payload.size(), kBlock));
  std::string back(payload.size(), '\0');
  ASSERT_EQ(ReadFully(fd_, back.data(), back.size(), header->header_bytes),
            static_cast<ssize_t>(payload.size()));
  EXPECT_EQ(back, payload);
  for (size_t b = 0; b < header->blocks.size(); ++b) {
    EXPECT_EQ(BlockChecksum(back.data(), back.size(), b, kBlock), header->blocks[b]) << b;
  }
  // Length 0 takes the copy at whatever length its header says.
  auto any = ReadCopyHeader(fd_, kName, 0);
  ASSERT_TRUE(any.ok()) << any.error().message;
  EXPECT_EQ(any->payload, payload.size());
}

TEST_F(TierCopyTest, AHeaderLongerThanAPageIsReadWhole) {
  const std::string payload = Payload(600 * 4096 + 7, 'l');
  const size_t header_bytes = WriteCopy(kName, payload, 4096);
  ASSERT_EQ(header_bytes, 2 * kCopyAlign);
  auto header = ReadCopyHeader(fd_, kName, payload.size());
  ASSERT_TRUE(header.ok()) << header.error().message;
  EXPECT_EQ(header->block_bytes, 4096u);
  ASSERT_EQ(header->blocks.size(), 601u);
  // The sums on the second page are the payload's too.
  for (size_t b : {0, 500, 599, 600}) {
    EXPECT_EQ(header->blocks[b], BlockChecksum(payload.data(), payload.size(), b, 4096)) << b;
  }
}

TEST_F(TierCopyTest, AChangedPayloadByteNoLongerMatchesItsBlocksSum) {
  std::string payload = Payload(100'000, 'd');
  WriteCopy(kName, payload);
  payload[3 * kBlock + 5] ^= 1;
  ASSERT_TRUE(WriteFully(fd_, payload.data(), payload.size(), header_.size()));
  auto header = ReadCopyHeader(fd_, kName, payload.size());
  ASSERT_TRUE(header.ok()) << header.error().message;  // the header itself is intact
  for (size_t b = 0; b < header->blocks.size(); ++b) {
    EXPECT_EQ(BlockChecksum(payload.data(), payload.size(), b, kBlock) == header->blocks[b], b != 3)
        << "block " << b;
  }
}

TEST_F(TierCopyTest, AnEmptyOrCutFileHasNoHeader) {
  fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd_, 0);
  EXPECT_EQ(Refusal(kName, 0), "no header");
  const std::string payload = Payload(1000, 'c');
  WriteCopy(kName, payload);
  ASSERT_EQ(ftruncate(fd_, 31), 0);  // short of the fixed 32 bytes
  EXPECT_EQ(Refusal(kName, 0), "no header");
}

TEST_F(TierCopyTest, AHeaderCutShortOfItsSecondPageIsRefused) {
  const std::string payload = Payload(600 * 4096, 's');
  WriteCopy(kName, payload, 4096);
  ASSERT_EQ(ftruncate(fd_, kCopyAlign + 100), 0);
  EXPECT_EQ(Refusal(kName, payload.size()), "a short header");
}

TEST_F(TierCopyTest, AHeaderOfAnotherLengthNameOrVersionDoesNotMatch) {
  const std::string payload = Payload(1000, 'm');
  WriteCopy(kName, payload);
  EXPECT_EQ(Refusal(kName, payload.size()), "accepted");
  EXPECT_EQ(Refusal(kName, payload.size() + 1), "a header that does not match");
  EXPECT_EQ(Refusal(kName + "x", payload.size()), "a header that does not match");
  Patch<uint32_t>(kVersionAt, kCopyVersion + 1);
  EXPECT_EQ(Refusal(kName, payload.size()), "a header that does not match");
  Patch<uint32_t>(kVersionAt, kCopyVersion);
  Patch<char>(0, 'X');  // the magic
  EXPECT_EQ(Refusal(kName, payload.size()), "a header that does not match");
  Patch<char>(0, 'G');
  Patch<uint32_t>(kHeaderBytesAt, 2 * kCopyAlign);  // not what the rest implies
  EXPECT_EQ(Refusal(kName, payload.size()), "a header that does not match");
  Patch<uint32_t>(kHeaderBytesAt, kCopyAlign);
  EXPECT_EQ(Refusal(kName, payload.size()), "accepted");
}

// One block either way, so only the block size itself decides.
TEST_F(TierCopyTest, OnlyPowersOfTwoFrom4KiBTo1MiBAreBlockSizes) {
  const std::string payload = Payload(1000, 'b');
  WriteCopy(kName, payload);
  for (uint32_t bytes : {4096u, 8192u, 64u << 10, 1u << 20}) {
    Patch<uint32_t>(kBlockBytesAt, bytes);
    auto header = ReadCopyHeader(fd_, kName, payload.size());
    ASSERT_TRUE(header.ok()) << bytes << ": " << header.error().message;
    EXPECT_EQ(header->block_bytes, bytes);
  }
  for (uint32_t bytes : {0u, 2048u, 3000u, 12288u, 2u << 20}) {
    Patch<uint32_t>(kBlockBytesAt, bytes);
    EXPECT_EQ(Refusal(kName, payload.size()), "a header that does not match") << bytes;
  }
}

TEST_F(TierCopyTest, AHeaderNamingAnotherGroupIsRefused) {
  const std::string other = "g000004-0123456789abcdef.grp";  // as long as kName
  ASSERT_EQ(other.size(), kName.size());
  const std::string payload = Payload(1000, 'o');
  WriteCopy(other, payload);
  EXPECT_EQ(Refusal(kName, payload.size()), "another group's header");
  EXPECT_EQ(Refusal(other, payload.size()), "accepted");
}

TEST_F(TierCopyTest, FullReadsAndWritesStopAtTheEndOrFail) {
  fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(fd_, 0);
  const std::string bytes = Payload(10'000, 'f');
  ASSERT_TRUE(WriteFully(fd_, bytes.data(), bytes.size(), 5));
  EXPECT_EQ(fs::file_size(path_), 10'005u);
  std::string back(20'000, '\0');
  EXPECT_EQ(ReadFully(fd_, back.data(), back.size(), 5), 10'000);
  EXPECT_EQ(back.substr(0, 10'000), bytes);
  EXPECT_EQ(ReadFully(fd_, back.data(), 10, 20'000), 0);  // past the end
  const int read_only = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(read_only, 0);
  errno = 0;
  EXPECT_FALSE(WriteFully(read_only, bytes.data(), bytes.size(), 0));
  EXPECT_EQ(errno, EBADF);
  close(read_only);
  EXPECT_EQ(ReadFully(-1, back.data(), 10, 0), -1);
}

}  // namespace
}  // namespace gpufs
