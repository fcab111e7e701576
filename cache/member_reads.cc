#include "cache/member_reads.h"

#include <algorithm>

#include "dataset/format/checksums.h"

namespace gpufs {

MemberChecks::MemberChecks(size_t files)
    : bits_(std::make_unique<std::atomic<uint64_t>[]>((files + 63) / 64)) {
  for (size_t i = 0; i < (files + 63) / 64; ++i) bits_[i].store(0, std::memory_order_relaxed);
}

bool MemberChecks::Verified(uint32_t index) const {
  return bits_[index / 64].load(std::memory_order_acquire) & (uint64_t{1} << (index % 64));
}

Status CheckMember(const Catalog& catalog, NodeId file, const char* bytes, std::string_view blob) {
  const FileExtent& f = catalog.Extent(file);
  if (ChecksumOf(bytes, f.size) == catalog.ChecksumAt(catalog.FileIndex(file))) return Ok{};
  return Fail(EIO, "cannot read {}: its checksum does not match; {} is damaged",
              catalog.PathOf(file), blob);
}

Status MemberChecks::Check(const Catalog& catalog, NodeId file, const char* bytes,
                           std::string_view blob) {
  if (Status s = CheckMember(catalog, file, bytes, blob); !s) return s;
  const uint32_t index = catalog.FileIndex(file);
  bits_[index / 64].fetch_or(uint64_t{1} << (index % 64), std::memory_order_acq_rel);
  return Ok{};
}

Result<CachedBytes> ReadMemberBytes(BlobSource& source, const Catalog& catalog, NodeId file,
                                    uint64_t offset, size_t size, MemberChecks* checks,
                                    const MemberRead& read) {
  const FileExtent& f = catalog.Extent(file);
  if (offset >= f.size) return CachedBytes{};
  size = static_cast<size_t>(std::min<uint64_t>(size, f.size - offset));
  const uint32_t blob = catalog.Group(f.group).blob;
  const bool verify = checks && !checks->Verified(catalog.FileIndex(file));
  // To verify, the whole member; else just the range asked for.
  const uint64_t start = verify ? 0 : offset;
  const size_t length = verify ? static_cast<size_t>(f.size) : size;
  auto bytes = std::make_unique<char[]>(std::max<size_t>(length, 1));
  Status got = read ? read(blob, f.offset + start, length, bytes.get())
                    : ReadExactly(source, ReadKind::kMember, blob, f.offset + start, length,
                                  bytes.get(), catalog.PathOf(file));
  if (!got) return got.error();
  if (verify) {
    if (Status s = checks->Check(catalog, file, bytes.get(), source.Describe(blob)); !s) {
      return s.error();
    }
  }
  return CachedBytes::Owned(std::move(bytes), offset - start, size);
}

DirectReads::DirectReads(BlobSource& source, const Catalog& catalog, bool verify)
    : source_(source),
      catalog_(catalog),
      checks_(verify && catalog.has_checksums()
                  ? std::make_unique<MemberChecks>(catalog.file_count())
                  : nullptr) {}

Result<CachedBytes> DirectReads::Read(NodeId file, uint64_t offset, size_t size) {
  return ReadMemberBytes(source_, catalog_, file, offset, size, checks_.get());
}

}  // namespace gpufs
