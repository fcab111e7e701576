// Fuzzes the plan file's reader, ReadPlanFile, on files whose checksums are right.
//
// The header's file size and both checksums are recomputed over the fuzzed bytes before the
// read, and the index checksum and archive stamp it is bound to are taken from the header:
// otherwise nearly every mutation would be refused there, and the checks behind would never
// run. The blobs' sizes, which the index would give, are taken from the plan records too
// (for the first four blobs), so that a mutated record reaches its arrays' checks. What the
// reader accepts must be decodable without a bounds check of its own: every range a decode
// follows is checked again here, Find must return each recipe for its own offsets, and the
// plans must survive being written and read again unchanged.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/compressed/decode_plan.h"
#include "dataset/compressed/plan_file.h"

namespace gpufs::fuzz {
namespace {

// The header fields read or rewritten here, at their offsets in plan_file.cc's header.
constexpr size_t kHeaderSize = 72;
constexpr size_t kRecordSize = 88;
constexpr size_t kFileSizeAt = 16;
constexpr size_t kBodyChecksumAt = 24;
constexpr size_t kIndexChecksumAt = 32;
constexpr size_t kSourceAt = 40;
constexpr size_t kPlanCountAt = 56;
constexpr size_t kHeaderChecksumAt = 64;
constexpr uint32_t kBlobs = 4;

[[noreturn]] void Broken(const char* what, uint64_t at) {
  std::fprintf(stderr, "plan invariant broken: %s (at %llu)\n", what,
               static_cast<unsigned long long>(at));
  __builtin_trap();
}

void Require(bool ok, const char* what, uint64_t at = 0) {
  if (!ok) Broken(what, at);
}

uint64_t Get64(const std::string& bytes, size_t at) {
  uint64_t value = 0;
  std::memcpy(&value, bytes.data() + at, sizeof(value));
  return value;
}

void Put64(std::string& bytes, size_t at, uint64_t value) {
  std::memcpy(bytes.data() + at, &value, sizeof(value));
}

// Makes the header's file size and both checksums agree with `bytes`.
void Reseal(std::string& bytes) {
  if (bytes.size() < kHeaderSize) return;
  Put64(bytes, kFileSizeAt, bytes.size());
  Put64(bytes, kBodyChecksumAt,
        XXH3_64bits(bytes.data() + kHeaderSize, bytes.size() - kHeaderSize));
  Put64(bytes, kHeaderChecksumAt, 0);
  Put64(bytes, kHeaderChecksumAt, XXH3_64bits(bytes.data(), kHeaderSize));
}

// The sizes an index would give the first kBlobs blobs: each the stored size of the first
// record naming it (the record's blob a u32 at its start, its stored size a u64 at 8).
std::vector<uint64_t> BlobSizes(const std::string& bytes) {
  std::vector<uint64_t> sizes(kBlobs, 0);
  std::vector<bool> seen(kBlobs, false);
  if (bytes.size() < kHeaderSize) return sizes;
  const uint64_t count = Get64(bytes, kPlanCountAt);
  for (uint64_t p = 0; p < count && p < (bytes.size() - kHeaderSize) / kRecordSize; ++p) {
    const size_t at = kHeaderSize + p * kRecordSize;
    uint32_t blob = 0;
    std::memcpy(&blob, bytes.data() + at, sizeof(blob));
    if (blob < kBlobs && !seen[blob]) {
      sizes[blob] = Get64(bytes, at + 8);
      seen[blob] = true;
    }
  }
  return sizes;
}

bool Inside(uint64_t offset, uint64_t size, uint64_t end) {
  return offset <= end && size <= end - offset;
}

void CheckZipRecipe(const DecodePlan& plan, const DecodeRecipe& r) {
  Require(plan.kind == DecodeKind::kZip, "a zip recipe outside a zip plan", r.offset);
  Require(r.count > 0 && Inside(r.first, r.count, plan.parts.size()), "parts outside", r.offset);
  uint64_t made = 0;
  for (uint64_t k = r.first; k < uint64_t{r.first} + r.count; ++k) {
    const ZipPart& part = plan.parts[k];
    Require(part.data_offset >= r.stored_offset &&
                Inside(part.data_offset - r.stored_offset, part.stored_size, r.stored_size),
            "a part's data outside its recipe's stored range", k);
    Require(part.method == 8 || (part.method == 0 && part.stored_size == part.size),
            "a part of an unknown method", k);
    Require(part.size <= r.size - made, "parts past their recipe's size", k);
    made += part.size;
  }
  Require(made == r.size, "parts short of their recipe's size", r.offset);
}

void CheckGzipRecipe(const DecodePlan& plan, const DecodeRecipe& r) {
  Require(plan.kind == DecodeKind::kGzip, "a gzip recipe outside a gzip plan", r.offset);
  Require(r.count == 0 && r.first < plan.points.size(), "a point outside", r.offset);
  const GzipPoint& pt = plan.points[r.first];
  Require(pt.out <= r.offset && pt.bits <= 7, "a point after its recipe", r.offset);
  Require(pt.in >= (pt.bits > 0 ? 1 : 0) && r.stored_offset == pt.in - (pt.bits > 0 ? 1 : 0),
          "a recipe that does not read from its point", r.offset);
  Require(plan.windows.size() % kGzipWindow == 0, "a partial window", r.offset);
  if (pt.member == 1) {
    Require(pt.bits == 0 && pt.window == kNoWindow, "a member's start with a window", r.offset);
  } else if (pt.window != kNoWindow) {
    Require(pt.window < plan.windows.size() / kGzipWindow, "a window outside", pt.window);
    const std::span<const char> window = plan.Window(pt.window);
    volatile char edges = window.front() ^ window.back();  // ASan sees both ends read
    (void)edges;
  }
}

void CheckPlan(const DecodePlan& plan, const std::vector<uint64_t>& blob_sizes) {
  Require(plan.blob < blob_sizes.size() && plan.stored_size == blob_sizes[plan.blob],
          "a plan of no blob, or of another size", plan.blob);
  uint64_t end = 0;
  for (const DecodeRecipe& r : plan.recipes) {
    Require(r.size > 0 && r.size <= kMaxRecipeSize, "a recipe of no or too many bytes", r.offset);
    Require(r.offset >= end, "recipes out of order or overlapping", r.offset);
    Require(Inside(r.offset, r.size, plan.decoded_size), "a recipe past decoded space", r.offset);
    Require(Inside(r.stored_offset, r.stored_size, plan.stored_size),
            "a recipe reading past the archive", r.offset);
    Require(plan.Find(r.offset) == &r && plan.Find(r.offset + r.size - 1) == &r,
            "Find misses a recipe", r.offset);
    end = r.offset + r.size;
    switch (r.kind) {
      case DecodeKind::kAsStored:
        Require(
            plan.kind == DecodeKind::kZip && r.offset == r.stored_offset && r.size == r.stored_size,
            "bytes served as stored that move", r.offset);
        break;
      case DecodeKind::kZip:
        CheckZipRecipe(plan, r);
        break;
      case DecodeKind::kGzip:
        CheckGzipRecipe(plan, r);
        break;
      default:
        Broken("a recipe of no kind", r.offset);
    }
  }
}

bool Same(const DecodePlan& a, const DecodePlan& b) {
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size() &&
           (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0);
  };
  return a.blob == b.blob && a.kind == b.kind && a.stored_size == b.stored_size &&
         a.decoded_size == b.decoded_size && same(a.recipes, b.recipes) && same(a.parts, b.parts) &&
         same(a.points, b.points) && same(a.windows, b.windows);
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufs;
  using namespace gpufs::fuzz;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  Reseal(bytes);
  if (bytes.size() < kHeaderSize) {
    Require(!ReadPlanFile(bytes, "fuzz.plan", 0, {}, {}).ok(), "a short file accepted");
    return 0;
  }
  const uint64_t index_checksum = Get64(bytes, kIndexChecksumAt);
  const SourceStamp source{Get64(bytes, kSourceAt),
                           static_cast<int64_t>(Get64(bytes, kSourceAt + 8))};
  const std::vector<uint64_t> blob_sizes = BlobSizes(bytes);
  auto plans = ReadPlanFile(bytes, "fuzz.plan", index_checksum, source, blob_sizes);
  if (!plans) {
    Require(plans.error().message.starts_with("cannot use plan file fuzz.plan: "),
            "a refusal that does not name the file");
    return 0;
  }
  for (const DecodePlan& plan : *plans) CheckPlan(plan, blob_sizes);
  const std::string again = PlanFileBytes(*plans, index_checksum, source);
  auto reread = ReadPlanFile(again, "again.plan", index_checksum, source, blob_sizes);
  Require(reread.ok() && reread->size() == plans->size(), "accepted plans written unreadably");
  for (size_t p = 0; p < plans->size(); ++p) {
    Require(Same((*reread)[p], (*plans)[p]), "accepted plans written differently", p);
  }
  return 0;
}
