#include "source/blob_source.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>

namespace gpufs {
namespace {

// Waits for a set of reads; each part's outcome is kept by index.
struct Latch {
  std::mutex mu;
  std::condition_variable done;
  size_t left = 0;                      // guarded by mu
  std::vector<Result<size_t>> results;  // guarded by mu

  std::function<void(Result<size_t>)> Slot(size_t index) {
    return [this, index](Result<size_t> r) {
      std::lock_guard lock(mu);
      results[index] = std::move(r);
      if (--left == 0) done.notify_all();
    };
  }
  void Wait() {
    std::unique_lock lock(mu);
    done.wait(lock, [this] { return left == 0; });
  }
};

}  // namespace

std::string BlobSource::Identity(uint32_t blob) const {
  const BlobInfo* seen = Expected(blob);
  if (!seen) return {};
  return fmt::format("size={} xxh3={:016x} mtime_ns={}", seen->size, seen->checksum,
                     seen->mtime_ns);
}

bool BlobSource::Readahead(uint32_t, uint64_t, size_t, uint64_t, std::function<void()>,
                           std::function<void()>) {
  return false;
}

Result<size_t> BlobSource::ReadCached(uint32_t blob, uint64_t, size_t, char*) {
  return Fail(EAGAIN, "{} has no page cache", Describe(blob));
}

Result<size_t> BlobSource::Read(ReadKind kind, uint32_t blob, uint64_t offset, size_t length,
                                char* buffer) {
  return ReadRange(*this, kind, blob, offset, length, buffer, length);
}

Result<size_t> ReadRange(BlobSource& source, ReadKind kind, uint32_t blob, uint64_t offset,
                         size_t length, char* buffer, size_t part) {
  if (length == 0) return size_t{0};
  if (part == 0) part = source.PartSize() ? source.PartSize() : length;
  part = std::max(part, source.Alignment());
  Latch latch;
  std::vector<BlobRead> reads;
  for (size_t at = 0; at < length; at += part) {
    reads.push_back(BlobRead{blob, offset + at, std::min(part, length - at), buffer + at, {}});
  }
  latch.left = reads.size();
  latch.results.assign(reads.size(), size_t{0});
  for (size_t i = 0; i < reads.size(); ++i) reads[i].done = latch.Slot(i);
  std::vector<size_t> lengths;
  for (const BlobRead& r : reads) lengths.push_back(r.length);
  source.Submit(kind, std::move(reads));
  latch.Wait();
  size_t total = 0;
  for (size_t i = 0; i < latch.results.size(); ++i) {
    if (!latch.results[i]) return latch.results[i].error();
    total += *latch.results[i];
    if (*latch.results[i] < lengths[i]) break;  // the blob ends here
  }
  return total;
}

Status ReadExactly(BlobSource& source, ReadKind kind, uint32_t blob, uint64_t offset, size_t length,
                   char* buffer, std::string_view what) {
  auto got = source.Read(kind, blob, offset, length, buffer);
  if (!got) return got.error();
  if (*got != length) {
    return Fail(EIO, "cannot read {}: blob {} ends early", what, source.Describe(blob));
  }
  return Ok{};
}

}  // namespace gpufs
