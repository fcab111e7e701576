// Fuzzes the gzip reader's first pass (GzipReader) and the decoding of a group
// (DecodeGzipRecipe).
//
// The input is read as a gzip stream with a small span, so that even a small stream has
// several access points; then recipes made from those points and the checkpoints are
// decoded. Errors are fine; a crash, a read outside a buffer or a hang is a finding, and so
// is a recipe of a stream the first pass accepted whole that decodes to other bytes than
// the reader serves.
//
// The input also makes a plan directly: its first bytes are the fields of a few points and
// a recipe, the rest the stored bytes, which DecodeGzipRecipe must refuse or decode without
// reading or writing outside what it is given.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dataset/compressed/gzip.h"

namespace gpufs::fuzz {
namespace {

constexpr uint64_t kSpan = 1024;
constexpr size_t kMaxOut = 1 << 20;  // bounds a recipe's output, from a point or the input

[[noreturn]] void Broken(const char* what, uint64_t at) {
  std::fprintf(stderr, "gzip invariant broken: %s (at %llu)\n", what,
               static_cast<unsigned long long>(at));
  __builtin_trap();
}

void Require(bool ok, const char* what, uint64_t at = 0) {
  if (!ok) Broken(what, at);
}

// The input, read through a RangeReader as a file would be.
class MemReader : public RangeReader {
 public:
  MemReader(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}
  uint64_t size() const override { return size_; }
  const std::string& label() const override { return label_; }
  Result<size_t> ReadAt(uint64_t offset, size_t length, char* out) override {
    if (offset >= size_) return size_t{0};
    const size_t n = static_cast<size_t>(std::min<uint64_t>(length, size_ - offset));
    std::memcpy(out, data_ + offset, n);
    return n;
  }

 private:
  const char* data_;
  size_t size_;
  std::string label_ = "fuzz.tar.gz";
};

// Decodes [offset, offset + size) from point `first` of `plan`, the stored range ending
// where the reader's checkpoints say; with `expect`, the bytes must be those.
void DecodeFromPoint(const DecodePlan& plan, const GzipReader& reader, uint32_t first,
                     uint64_t offset, uint64_t size, const uint8_t* data, size_t data_size,
                     const std::string* expect) {
  const GzipPoint& p = plan.points[first];
  DecodeRecipe r{.offset = offset, .size = size, .kind = DecodeKind::kGzip, .first = first};
  r.stored_offset = p.in - (p.bits ? 1 : 0);
  const uint64_t end = reader.StoredEnd(offset + size);
  Require(end <= data_size, "StoredEnd lies past the archive", end);
  Require(end >= r.stored_offset || !expect, "StoredEnd lies before a point", first);
  if (end < r.stored_offset) return;
  r.stored_size = end - r.stored_offset;
  std::vector<char> stored(data + r.stored_offset, data + end);  // exactly, for ASan
  std::vector<char> out(size);
  Status s = DecodeGzipRecipe(plan, r, stored, out, "fuzz.tar.gz", {});
  if (!expect) return;
  Require(s.ok(), "a recipe of an accepted stream did not decode", first);
  Require(std::equal(out.begin(), out.end(), expect->begin() + offset),
          "a recipe decoded other bytes than the reader read", first);
}

void FirstPassThenRecipes(const uint8_t* data, size_t size) {
  MemReader compressed(data, size);
  GzipReader reader(compressed, kSpan);
  std::string head(4096, '\0');
  auto n = reader.ReadAt(0, head.size(), head.data());
  const bool whole = reader.Finish().ok();
  const uint64_t decoded = whole ? reader.decoded_size() : 0;
  std::string all;
  if (whole && decoded <= 4 * kMaxOut) {
    all.resize(decoded);
    auto got = reader.ReadAt(0, all.size(), all.data());
    Require(got.ok() && *got == decoded, "an accepted stream did not read back whole", decoded);
    Require(!n || head.compare(0, *n, all, 0, *n) == 0, "a second read differs", 0);
  }
  Require(reader.compressed_read() <= size, "more was read than the archive holds");
  DecodePlan plan;
  plan.kind = DecodeKind::kGzip;
  plan.points = reader.points();
  plan.windows = reader.TakeWindows();
  for (size_t i = 0; i < plan.points.size(); ++i) {
    const GzipPoint& p = plan.points[i];
    Require(i == 0 || p.out > plan.points[i - 1].out, "points are not sorted", i);
    Require(p.member || p.window < plan.windows.size() / kGzipWindow, "a point's window is missing",
            i);
    Require(p.in <= size && p.bits < 8, "a point lies outside the archive", i);
  }
  const std::string* expect = all.size() == decoded && whole ? &all : nullptr;
  const uint64_t limit = whole ? decoded : (plan.points.empty() ? 0 : plan.points.back().out);
  for (size_t i = 0; i < plan.points.size() && i < 16; ++i) {
    const uint64_t offset = plan.points[i].out + (i * 97) % kSpan;
    if (offset >= limit) continue;
    const uint64_t length = std::min<uint64_t>({limit - offset, kMaxOut, 1 + (i * 7919) % 5000});
    DecodeFromPoint(plan, reader, static_cast<uint32_t>(i), offset, length, data, size, expect);
  }
}

template <typename T>
T Take(const uint8_t*& data, size_t& size) {
  T value{};
  const size_t n = std::min(sizeof(T), size);
  std::memcpy(&value, data, n);
  data += n;
  size -= n;
  return value;
}

// A plan and a recipe whose fields are the input's first bytes; the stored bytes the rest.
void PlanFromInput(const uint8_t* data, size_t size) {
  DecodePlan plan;
  plan.kind = DecodeKind::kGzip;
  const auto counts = Take<uint8_t>(data, size);
  plan.points.resize(counts % 4);
  for (GzipPoint& p : plan.points) p = Take<GzipPoint>(data, size);
  plan.windows.assign(((counts >> 2) % 3) * kGzipWindow, '\0');
  const size_t copied = std::min<size_t>(plan.windows.size(), 256);
  if (copied) std::memcpy(plan.windows.data(), data, std::min(copied, size));
  DecodeRecipe r = Take<DecodeRecipe>(data, size);
  r.kind = DecodeKind::kGzip;
  r.size %= kMaxOut;
  // Most plans are refused at their first field; these make some agree with themselves.
  if (r.first < plan.points.size() && (counts & 0x10)) {
    const GzipPoint& p = plan.points[r.first];
    r.stored_offset = p.in - (p.bits ? 1 : 0);
    if (counts & 0x20) r.offset = p.out + r.offset % (64 << 10);
  }
  r.stored_size = size;
  std::vector<char> stored(data, data + size);
  std::vector<char> out(r.size);
  const MemberNamer name_of = [](uint64_t offset) { return std::to_string(offset); };
  (void)DecodeGzipRecipe(plan, r, stored, out, "fuzz.tar.gz", name_of);
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpufs::fuzz::FirstPassThenRecipes(data, size);
  gpufs::fuzz::PlanFromInput(data, size);
  return 0;
}
