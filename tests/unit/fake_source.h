// A blob source in memory for the unit tests: blobs are strings, reads are answered on the
// caller's thread, every read is recorded, and a blob can be made to fail.
#pragma once

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "source/blob_source.h"

namespace gpufs {

class FakeSource : public BlobSource {
 public:
  struct Call {
    ReadKind kind;
    uint32_t blob;
    uint64_t offset;
    size_t length;
  };

  explicit FakeSource(std::vector<std::string> blobs) : blobs_(std::move(blobs)) {}

  std::string_view kind() const override { return "fake"; }
  size_t blob_count() const override { return blobs_.size(); }
  std::string Describe(uint32_t blob) const override { return "fake://" + std::to_string(blob); }
  const BlobInfo* Expected(uint32_t) const override { return nullptr; }
  // A blob whose bytes the test changes gets a new version, as a store gives a new ETag.
  std::string Identity(uint32_t blob) const override {
    std::lock_guard lock(mu_);
    return fmt::format("fake {} v{}", blob, versions_.count(blob) ? versions_.at(blob) : 0);
  }
  void Bump(uint32_t blob) {
    std::lock_guard lock(mu_);
    ++versions_[blob];
  }

  void Submit(ReadKind kind, std::vector<BlobRead> reads) override {
    for (BlobRead& r : reads) r.done(Answer(kind, r.blob, r.offset, r.length, r.buffer));
  }

  nlohmann::json Stats() const override {
    std::lock_guard lock(mu_);
    return {{source_stat::kKind, "fake"}, {source_stat::kRequests, calls_.size()}};
  }

  // Every later read of `blob` fails with `code`.
  void Fail(uint32_t blob, int code) {
    std::lock_guard lock(mu_);
    failing_[blob] = code;
  }
  std::vector<Call> calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  std::string& blob(uint32_t b) { return blobs_[b]; }
  size_t group_reads() const {
    std::lock_guard lock(mu_);
    return std::count_if(calls_.begin(), calls_.end(),
                         [](const Call& c) { return c.kind == ReadKind::kGroup; });
  }

 private:
  Result<size_t> Answer(ReadKind kind, uint32_t blob, uint64_t offset, size_t length,
                        char* buffer) {
    std::lock_guard lock(mu_);
    calls_.push_back(Call{kind, blob, offset, length});
    if (auto it = failing_.find(blob); it != failing_.end()) {
      return gpufs::Fail(it->second, "cannot read {}: injected", Describe(blob));
    }
    const std::string& bytes = blobs_[blob];
    if (offset >= bytes.size()) return size_t{0};
    const size_t n = std::min<size_t>(length, bytes.size() - offset);
    std::memcpy(buffer, bytes.data() + offset, n);
    return n;
  }

  std::vector<std::string> blobs_;
  mutable std::mutex mu_;
  std::vector<Call> calls_;           // guarded by mu_
  std::map<uint32_t, int> failing_;   // guarded by mu_
  std::map<uint32_t, int> versions_;  // guarded by mu_
};

}  // namespace gpufs
