#include "dataset/format/checksums.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "dataset/format/xxh3_functions.h"

namespace gpufs {
namespace {

constexpr size_t kChunk = 4u << 20;

// File indices of each group, by offset.
std::vector<std::vector<uint32_t>> MembersByGroup(const Catalog& catalog) {
  std::vector<std::vector<uint32_t>> out(catalog.group_count());
  for (uint32_t i = 0; i < catalog.file_count(); ++i) out[catalog.ExtentAt(i).group].push_back(i);
  for (auto& members : out) {
    std::sort(members.begin(), members.end(), [&](uint32_t a, uint32_t b) {
      return catalog.ExtentAt(a).offset < catalog.ExtentAt(b).offset;
    });
  }
  return out;
}

// One sequential pass over a group's range: each chunk feeds the members it overlaps
// (members may overlap each other in a hand-made index) and, when the group is the whole
// blob, the blob's hash.
Status HashGroup(int fd, const Catalog& catalog, uint32_t group,
                 const std::vector<uint32_t>& members, bool whole_blob, char* buffer,
                 DatasetChecksums& out, Progress& progress) {
  const GroupExtent& g = catalog.Group(group);
  std::vector<std::unique_ptr<ChecksumStream>> states(members.size());
  std::vector<std::unique_ptr<Sha256Stream>> digests(out.sha256.empty() ? 0 : members.size());
  for (auto& s : states) s = std::make_unique<ChecksumStream>();
  for (auto& d : digests) d = std::make_unique<Sha256Stream>();
  ChecksumStream blob;
  size_t first_open = 0;  // members before this one are complete
  for (uint64_t pos = g.offset; pos < g.offset + g.size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, g.offset + g.size - pos));
    const ssize_t n = pread(fd, buffer, want, static_cast<off_t>(pos));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(n < 0 ? errno : EIO, "{}", n < 0 ? strerror(errno) : "ends early");
    const uint64_t end = pos + static_cast<uint64_t>(n);
    if (whole_blob) blob.Update(buffer, static_cast<size_t>(n));
    for (size_t m = first_open; m < members.size() && catalog.ExtentAt(members[m]).offset < end;
         ++m) {
      const FileExtent f = catalog.ExtentAt(members[m]);
      const uint64_t from = std::max(pos, f.offset);
      const uint64_t to = std::min(end, f.offset + f.size);
      if (from < to) {
        states[m]->Update(buffer + (from - pos), static_cast<size_t>(to - from));
        if (!digests.empty())
          digests[m]->Update(buffer + (from - pos), static_cast<size_t>(to - from));
      }
      if (m == first_open && f.offset + f.size <= end) ++first_open;
    }
    progress.bytes += static_cast<uint64_t>(n);
    pos = end;
    if (progress.cancel) return Fail(EINTR, "interrupted");
  }
  for (size_t m = 0; m < members.size(); ++m) {
    out.files[members[m]] = states[m]->Digest();
    if (!digests.empty()) out.sha256[members[m]] = digests[m]->Digest();
  }
  if (whole_blob) out.blobs[g.blob] = blob.Digest();
  progress.files += members.size();
  return Ok{};
}

}  // namespace

namespace {

// libxxhash's XXH3, or the AVX2 build's where the CPU has it; chosen once.
const Xxh3Functions& Xxh3() {
  static constexpr Xxh3Functions kBaseline =
      Xxh3FunctionsOver<&XXH3_64bits, &XXH3_createState, &XXH3_64bits_reset, &XXH3_freeState,
                        &XXH3_64bits_update, &XXH3_64bits_digest>();
#ifdef GPUFS_XXH3_AVX2
  static const Xxh3Functions& chosen =
      __builtin_cpu_supports("avx2") ? Xxh3Avx2Functions() : kBaseline;
  return chosen;
#else
  return kBaseline;
#endif
}

}  // namespace

uint64_t ChecksumOf(const void* data, size_t size) { return Xxh3().of(data, size); }

ChecksumStream::ChecksumStream() : state_(Xxh3().make()) {
  if (state_ == nullptr) throw std::bad_alloc();
}
ChecksumStream::~ChecksumStream() { Xxh3().free(state_); }
void ChecksumStream::Update(const char* data, size_t size) { Xxh3().update(state_, data, size); }
uint64_t ChecksumStream::Digest() const { return Xxh3().digest(state_); }

Sha256Digest Sha256Of(const void* data, size_t size) {
  Sha256Digest digest{};
  unsigned int length = 0;
  EVP_Digest(data, size, digest.data(), &length, EVP_sha256(), nullptr);
  return digest;
}

Sha256Stream::Sha256Stream() : context_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(context_, EVP_sha256(), nullptr);
}
Sha256Stream::~Sha256Stream() { EVP_MD_CTX_free(context_); }
void Sha256Stream::Update(const char* data, size_t size) { EVP_DigestUpdate(context_, data, size); }
Sha256Digest Sha256Stream::Digest() {
  Sha256Digest digest{};
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_, digest.data(), &length);
  return digest;
}

std::string HexOf(const Sha256Digest& digest) {
  std::string hex;
  for (uint8_t b : digest) hex += fmt::format("{:02x}", b);
  return hex;
}

DatasetChecksums ComputeChecksums(const Catalog& catalog, const std::filesystem::path& dir,
                                  unsigned threads, Progress& progress, bool sha256) {
  DatasetChecksums out;
  out.files.resize(catalog.file_count());
  if (sha256) out.sha256.resize(catalog.file_count());
  out.blobs.resize(catalog.blobs().size());
  out.blob_sizes.resize(catalog.blobs().size());
  const auto members = MembersByGroup(catalog);
  std::vector<uint32_t> groups_in_blob(catalog.blobs().size());
  for (uint32_t g = 0; g < catalog.group_count(); ++g) ++groups_in_blob[catalog.Group(g).blob];
  progress.total_files = catalog.file_count();
  for (uint32_t g = 0; g < catalog.group_count(); ++g)
    progress.total_bytes += catalog.Group(g).size;
  std::atomic<uint32_t> next{0};
  std::mutex mu;  // guards out.unreadable
  auto work = [&] {
    auto buffer = std::make_unique<char[]>(kChunk);
    for (uint32_t g = next++; g < catalog.group_count() && !progress.cancel; g = next++) {
      const GroupExtent& group = catalog.Group(g);
      const std::filesystem::path path = dir / catalog.blobs()[group.blob];
      const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
      Status s = fd < 0 ? Fail(errno, "{}", strerror(errno)) : Status(Ok{});
      if (s && fstat(fd, &st) == 0) out.blob_sizes[group.blob] = static_cast<uint64_t>(st.st_size);
      const bool whole = groups_in_blob[group.blob] == 1 && group.offset == 0 &&
                         group.size == static_cast<uint64_t>(st.st_size);
      if (s) s = HashGroup(fd, catalog, g, members[g], whole, buffer.get(), out, progress);
      if (fd >= 0) close(fd);
      if (!s) {
        std::lock_guard lock(mu);
        out.unreadable.push_back(fmt::format("{}: {}", path.string(), s.error().message));
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < std::max(1u, threads); ++i) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  std::sort(out.unreadable.begin(), out.unreadable.end());
  return out;
}

std::vector<Damage> CompareChecksums(const Catalog& catalog,
                                     const std::vector<uint64_t>& stored_blobs,
                                     const DatasetChecksums& computed) {
  std::vector<Damage> damage;
  for (const std::string& line : computed.unreadable) damage.push_back(Damage{line, "unreadable"});
  for (size_t b = 0; b < stored_blobs.size() && b < computed.blobs.size(); ++b) {
    if (stored_blobs[b] != 0 && computed.blobs[b] != 0 && stored_blobs[b] != computed.blobs[b]) {
      damage.push_back(Damage{catalog.blobs()[b], "blob checksum mismatch"});
    }
  }
  for (uint32_t f = 0; f < catalog.file_count(); ++f) {
    if (catalog.ChecksumAt(f) != computed.files[f]) {
      damage.push_back(Damage{catalog.PathOf(catalog.FileNode(f)), "checksum mismatch"});
    }
  }
  return damage;
}

}  // namespace gpufs
