#include "source/local_source.h"

#include <fcntl.h>

#include <algorithm>
#include <cstring>

namespace gpufs {
namespace {

constexpr uint64_t kSmallestPart = 256 << 10;
constexpr uint64_t kLargestPart = 4 << 20;
constexpr uint64_t kUnknownDevicePart = 1 << 20;
constexpr uint64_t kBytesInFlight = 10 << 20;
// Read-ahead for the page cache: as much as keeps a throttled volume at its full rate
// (see PartsInFlight), the reads of group loads beside it, in ranges read at once.
constexpr uint64_t kAheadInFlight = 32 << 20;
constexpr unsigned kAheadThreads = 8;

size_t PartFor(const BlobFiles& blobs, size_t part) {
  if (part != 0 || blobs.size() == 0) return part;
  const uint64_t device = DeviceRequestBytes(blobs.PathOf(0));
  if (device == 0) return kUnknownDevicePart;
  return std::clamp(device / 4096 * 4096, kSmallestPart, kLargestPart);
}

}  // namespace

uint64_t DeviceRequestBytes(const std::filesystem::path& path) {
  return DeviceQueueValue(path, "max_sectors_kb").value_or(0) << 10;
}

LocalSource::LocalSource(BlobFiles& blobs, IoEngine& engine, size_t part)
    : blobs_(blobs),
      engine_(engine),
      part_(PartFor(blobs, part)),
      shape_(blobs.size() ? ShapeOf(blobs.PathOf(0)) : DeviceShape{}),
      ahead_(kAheadThreads, kAheadInFlight) {}

std::optional<DeviceShape> LocalSource::PageCacheShape() const {
  if (blobs_.size() == 0 || shape_.kind == DeviceShape::Kind::kMemory) return std::nullopt;
  return shape_;
}

bool LocalSource::Readahead(uint32_t blob, uint64_t offset, size_t length, uint64_t first,
                            std::function<void()> landed, std::function<void()> done) {
  auto fd = blobs_.Fd(blob);
  if (!fd) return false;  // a hint: the read that follows fails and says why
  if (!ahead_.Queue(*fd, offset, length, first, std::move(landed), std::move(done))) {
    return false;
  }
  requests_ += 1;
  return true;
}

Result<size_t> LocalSource::ReadCached(uint32_t blob, uint64_t offset, size_t length,
                                       char* buffer) {
  auto got = blobs_.ReadCachedToServe(blob, offset, buffer, length);
  if (got) bytes_ += *got;
  return got;
}

unsigned LocalSource::PartsInFlight() const {
  return static_cast<unsigned>(std::max<uint64_t>(2, kBytesInFlight / std::max<size_t>(part_, 1)));
}

void LocalSource::Submit(ReadKind kind, std::vector<BlobRead> reads) {
  std::vector<IoRequest> requests;
  requests.reserve(reads.size());
  for (BlobRead& read : reads) {
    IoRequest request = RequestFor(kind, std::move(read));
    if (request.fd >= 0) requests.push_back(std::move(request));
  }
  requests_ += requests.size();
  if (!requests.empty()) engine_.Submit(std::move(requests));
}

// The engine's request for `read`, or one with fd -1 when the blob cannot be opened (its
// `done` has then been told why).
IoRequest LocalSource::RequestFor(ReadKind kind, BlobRead read) {
  int fd = -1;
  bool direct = false;
  if (kind == ReadKind::kGroup) {
    auto handle = blobs_.DirectFd(read.blob);
    if (handle) std::tie(fd, direct) = std::pair{handle->fd, handle->direct};
    if (!handle) read.done(handle.error());
  } else {
    auto opened = blobs_.Fd(read.blob);
    if (opened) fd = *opened;
    if (!opened) read.done(opened.error());
  }
  if (fd < 0) {
    ++errors_;
    return IoRequest{};
  }
  const uint32_t blob = read.blob;
  const uint64_t offset = read.offset;
  const size_t length = read.length;
  const bool drop = !direct && kind != ReadKind::kStage;
  const bool urgent = read.urgent || kind == ReadKind::kMember;
  auto done = [this, fd, drop, blob, offset, length, done = std::move(read.done)](ssize_t n) {
    if (drop) {  // the bytes now live in the arena or the served file's cache
      posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(length),
                    POSIX_FADV_DONTNEED);
    }
    if (n < 0) {
      ++errors_;
      done(Fail(static_cast<int>(-n), "cannot read blob {} at byte {}: {}",
                blobs_.PathOf(blob).string(), offset, strerror(static_cast<int>(-n))));
      return;
    }
    bytes_ += static_cast<uint64_t>(n);
    done(static_cast<size_t>(n));
  };
  return IoRequest{fd,     static_cast<int>(blob), offset, length, read.buffer,
                   urgent, std::move(done)};
}

Result<size_t> LocalSource::Read(ReadKind kind, uint32_t blob, uint64_t offset, size_t length,
                                 char* buffer) {
  ++requests_;
  auto got = kind == ReadKind::kMember ? blobs_.ReadToServe(blob, offset, buffer, length)
                                       : blobs_.ReadAt(blob, offset, buffer, length);
  if (!got) {
    ++errors_;
    return got.error();
  }
  bytes_ += *got;
  return got;
}

nlohmann::json LocalSource::Stats() const {
  using namespace source_stat;
  nlohmann::json j;
  j[kKind] = std::string(kind());
  j[kRequests] = requests_.load();
  j[kErrors] = errors_.load();
  j[kBytes] = bytes_.load() + ahead_.bytes_read();
  j["engine"] = std::string(engine_.name());
  return j;
}

}  // namespace gpufs
