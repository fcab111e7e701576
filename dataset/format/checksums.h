// Reads every group of a dataset once, sequentially, and computes the XXH3-64 and the
// SHA-256 of each member and the XXH3-64 of each blob that a group covers whole. `gpufsd
// index` stores the result; `gpufsd verify` and the daemon's --verify compare against it.
//
// Two hashes, for two jobs: XXH3-64 (tens of GB/s) catches damage; SHA-256 (OpenSSL's,
// about 2 GB/s a core with the CPU's SHA instructions) is what bytes from someone who may
// lie (a peer's proxy, a shared disk cache) are checked against, since no one can make
// other bytes that match it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "dataset/catalog.h"
#include "dataset/format/progress.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header

namespace gpufs {

struct DatasetChecksums {
  std::vector<uint64_t> files;       // indexed like the catalog's file table
  std::vector<Sha256Digest> sha256;  // likewise, when asked for
  std::vector<uint64_t> blobs;       // indexed like Catalog::blobs(); 0 when not whole in a group
  std::vector<uint64_t> blob_sizes;
  std::vector<std::string> unreadable;  // "<blob>: <reason>" for blobs that could not be read
};

// Hashes on `threads` threads; a blob that cannot be read is recorded, not fatal, so that
// a verify names every damaged file rather than the first.
// SHA-256 digests only when `sha256` (eight times the CPU of the checksums alone).
DatasetChecksums ComputeChecksums(const Catalog& catalog, const std::filesystem::path& dir,
                                  unsigned threads, Progress& progress, bool sha256 = false);

// A damaged member or blob, as verify reports it.
struct Damage {
  std::string path;  // the file in the tree, or the blob
  std::string reason;
};

// Compares computed checksums with those the catalog (and its blob table) holds.
std::vector<Damage> CompareChecksums(const Catalog& catalog,
                                     const std::vector<uint64_t>& stored_blobs,
                                     const DatasetChecksums& computed);

// The XXH3-64 of `size` bytes; what a member's checksum is.
uint64_t ChecksumOf(const void* data, size_t size);

// The same checksum over bytes that arrive in pieces.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  void Update(const char* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;  // made by the XXH3 functions checksums.cc chose
};

// The SHA-256 of `size` bytes.
Sha256Digest Sha256Of(const void* data, size_t size);

// The same digest over bytes that arrive in pieces.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void Update(const char* data, size_t size);
  Sha256Digest Digest();

 private:
  ::evp_md_ctx_st* context_;
};

// Lower-case hex, for messages.
std::string HexOf(const Sha256Digest& digest);

}  // namespace gpufs
