// XXH3 through checksums.cc (the AVX2 build where the CPU has it) gives libxxhash's hashes,
// one-shot and streamed in uneven pieces, at every length class XXH3 treats apart.
#include "dataset/format/checksums.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <random>
#include <vector>

namespace gpufs {
namespace {

TEST(Checksums, Xxh3IsLibxxhashs) {
  std::mt19937_64 random(7);
  std::vector<char> bytes(5u << 20);
  for (char& c : bytes) c = static_cast<char>(random());
  for (size_t size : {size_t{0}, size_t{1}, size_t{16}, size_t{128}, size_t{240}, size_t{241},
                      size_t{1024}, size_t{65537}, size_t{1} << 20, bytes.size() - 3}) {
    const uint64_t want = XXH3_64bits(bytes.data() + 3, size);
    EXPECT_EQ(ChecksumOf(bytes.data() + 3, size), want) << size;
    ChecksumStream stream;
    for (size_t at = 0, piece = 1; at < size; at += piece, piece = piece * 3 + 7) {
      stream.Update(bytes.data() + 3 + at, std::min(piece, size - at));
    }
    EXPECT_EQ(stream.Digest(), want) << size;
  }
}

}  // namespace
}  // namespace gpufs
