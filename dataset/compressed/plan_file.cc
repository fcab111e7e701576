// Writes and reads the plan file (plan_file.h): its header and plan records, and the checks
// that make a plan read from it safe to decode.
#include "dataset/compressed/plan_file.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
#include <utility>

namespace gpufs {
namespace {

static_assert(std::endian::native == std::endian::little, "the plan file is little-endian");

constexpr char kPlanMagic[8] = {'G', 'P', 'U', 'F', 'S', 'P', 'L', 'N'};

// One array of a plan: where it starts in the file, and its length (in records; in bytes
// for the windows).
struct ArrayRef {
  uint64_t offset = 0;
  uint64_t count = 0;
};

struct PlanHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint64_t file_size;
  uint64_t body_checksum;   // XXH3-64 of the bytes after the header
  uint64_t index_checksum;  // the body checksum of the index the plans go with
  uint64_t source_size;
  int64_t source_mtime_ns;
  uint64_t plan_count;
  uint64_t header_checksum;  // XXH3-64 of the header with this field zero
};
static_assert(sizeof(PlanHeader) == 72);

struct PlanRecord {
  uint32_t blob;
  uint8_t kind;
  uint8_t reserved[3];
  uint64_t stored_size;
  uint64_t decoded_size;
  ArrayRef recipes;
  ArrayRef parts;
  ArrayRef points;
  ArrayRef windows;  // bytes, kGzipWindow per window
};
static_assert(sizeof(PlanRecord) == 88);

// Stored verbatim, so no byte of them may be padding that a write leaves undefined.
static_assert(std::has_unique_object_representations_v<PlanHeader>);
static_assert(std::has_unique_object_representations_v<PlanRecord>);
static_assert(std::has_unique_object_representations_v<DecodeRecipe>);
static_assert(std::has_unique_object_representations_v<ZipPart>);
static_assert(std::has_unique_object_representations_v<GzipPoint>);

uint64_t Align8(uint64_t n) { return (n + 7) & ~uint64_t{7}; }

uint64_t HeaderChecksum(PlanHeader h) {
  h.header_checksum = 0;
  return XXH3_64bits(&h, sizeof(h));
}

// Appends `items` at the next 8-byte boundary, each as `clean` leaves it.
template <typename T, typename Clean>
ArrayRef AppendArray(std::string& bytes, const std::vector<T>& items, Clean clean) {
  bytes.resize(Align8(bytes.size()), '\0');
  const ArrayRef ref{bytes.size(), items.size()};
  for (T item : items) {
    clean(item);
    bytes.append(reinterpret_cast<const char*>(&item), sizeof(item));
  }
  return ref;
}

// Appends the arrays of `plan` and returns its record.
PlanRecord AppendPlan(std::string& bytes, const DecodePlan& plan) {
  PlanRecord rec{};
  rec.blob = plan.blob;
  rec.kind = static_cast<uint8_t>(plan.kind);
  rec.stored_size = plan.stored_size;
  rec.decoded_size = plan.decoded_size;
  rec.recipes = AppendArray(bytes, plan.recipes, [](DecodeRecipe& r) {
    std::fill(std::begin(r.reserved), std::end(r.reserved), 0);
    r.reserved2 = 0;
  });
  rec.parts = AppendArray(bytes, plan.parts, [](ZipPart& p) { p.reserved = 0; });
  rec.points = AppendArray(bytes, plan.points, [](GzipPoint& p) { p.reserved = 0; });
  rec.windows = AppendArray(bytes, plan.windows, [](char&) {});
  return rec;
}

bool IsZero(const uint8_t (&bytes)[3]) { return bytes[0] == 0 && bytes[1] == 0 && bytes[2] == 0; }

// Reads the plans of one file, refusing the first thing wrong. Each array is checked before
// anything indexes with it: the parts and points before the recipes that name them.
class PlanReader {
 public:
  PlanReader(std::string_view bytes, std::string_view label,
             const std::vector<uint64_t>& blob_sizes)
      : bytes_(bytes), label_(label), blob_sizes_(blob_sizes) {}

  Result<PlanHeader> CheckHeader(uint64_t index_checksum, const SourceStamp& source) {
    const size_t size = bytes_.size();
    constexpr size_t kVersionEnd = sizeof(kPlanMagic) + sizeof(uint32_t);
    if (size < kVersionEnd) return Bad("the file is {} bytes, shorter than a header", size);
    if (std::memcmp(bytes_.data(), kPlanMagic, sizeof(kPlanMagic)) != 0) {
      return Bad("not a gpufs plan file");
    }
    uint32_t version = 0;
    std::memcpy(&version, bytes_.data() + sizeof(kPlanMagic), sizeof(version));
    if (version != kPlanFileVersion) {
      return Stale("it is plan file version {}, and this gpufsd reads version {}", version,
                   kPlanFileVersion);
    }
    if (size < sizeof(PlanHeader)) return Bad("the file is {} bytes, shorter than a header", size);
    PlanHeader h;
    std::memcpy(&h, bytes_.data(), sizeof(h));
    if (HeaderChecksum(h) != h.header_checksum) return Bad("header checksum mismatch");
    if (h.header_size != sizeof(PlanHeader)) return Bad("header size {} is wrong", h.header_size);
    if (h.file_size != size) {
      return Bad("the file is {} bytes but its header says {}: truncated or extended", size,
                 h.file_size);
    }
    if (XXH3_64bits(bytes_.data() + sizeof(h), size - sizeof(h)) != h.body_checksum) {
      return Bad("body checksum mismatch: the file is damaged");
    }
    if (h.index_checksum != index_checksum) {
      return Stale("it goes with another index (body checksum {:016x}, not {:016x})",
                   h.index_checksum, index_checksum);
    }
    if (h.source_size != source.size || h.source_mtime_ns != source.mtime_ns) {
      return Stale(
          "it was made of the archive when it was {} bytes with mtime {} ns, and it is {} "
          "bytes with mtime {} ns",
          h.source_size, h.source_mtime_ns, source.size, source.mtime_ns);
    }
    if (h.plan_count > (size - sizeof(h)) / sizeof(PlanRecord)) {
      return Bad("{} plans do not fit in a file of {} bytes", h.plan_count, size);
    }
    return h;
  }

  // Plan `p`, the one after `previous` (null for the first).
  Result<DecodePlan> ReadPlan(uint64_t p, const DecodePlan* previous) {
    PlanRecord rec;
    std::memcpy(&rec, bytes_.data() + sizeof(PlanHeader) + p * sizeof(PlanRecord), sizeof(rec));
    if (Status s = CheckRecord(rec, p, previous); !s) return s.error();
    DecodePlan plan;
    plan.blob = rec.blob;
    plan.kind = static_cast<DecodeKind>(rec.kind);
    plan.stored_size = rec.stored_size;
    plan.decoded_size = rec.decoded_size;
    plan.recipes = Copy<DecodeRecipe>(rec.recipes);
    plan.parts = Copy<ZipPart>(rec.parts);
    plan.points = Copy<GzipPoint>(rec.points);
    plan.windows = Copy<char>(rec.windows);
    if (plan.kind == DecodeKind::kZip && (!plan.points.empty() || !plan.windows.empty())) {
      return Bad("plan {} is a zip's, yet has gzip access points", p);
    }
    if (plan.kind == DecodeKind::kGzip && !plan.parts.empty()) {
      return Bad("plan {} is a gzip stream's, yet has zip parts", p);
    }
    if (Status s = CheckParts(plan, p); !s) return s.error();
    if (Status s = CheckPoints(plan, p); !s) return s.error();
    if (Status s = CheckRecipes(plan, p); !s) return s.error();
    return plan;
  }

 private:
  Status CheckRecord(const PlanRecord& rec, uint64_t p, const DecodePlan* previous) {
    if (rec.kind != static_cast<uint8_t>(DecodeKind::kZip) &&
        rec.kind != static_cast<uint8_t>(DecodeKind::kGzip)) {
      return Bad("plan {} is of kind {}, neither zip (1) nor gzip (2)", p, rec.kind);
    }
    if (!IsZero(rec.reserved)) return Bad("plan {} has reserved bytes set", p);
    if (rec.blob >= blob_sizes_.size()) {
      return Bad("plan {} is for blob {}, and the index has {} blobs", p, rec.blob,
                 blob_sizes_.size());
    }
    if (previous != nullptr && rec.blob <= previous->blob) {
      return Bad(
          "plan {} is for blob {}, after a plan for blob {}: plans are one per blob, in "
          "blob order",
          p, rec.blob, previous->blob);
    }
    if (rec.stored_size != blob_sizes_[rec.blob]) {
      return Bad("plan {} is for blob {} of {} bytes, which the index says is {} bytes", p,
                 rec.blob, rec.stored_size, blob_sizes_[rec.blob]);
    }
    if (Status s = CheckArray(rec.recipes, sizeof(DecodeRecipe), "recipes", p); !s) return s;
    if (Status s = CheckArray(rec.parts, sizeof(ZipPart), "zip parts", p); !s) return s;
    if (Status s = CheckArray(rec.points, sizeof(GzipPoint), "access points", p); !s) return s;
    if (Status s = CheckArray(rec.windows, 1, "windows", p); !s) return s;
    if (rec.windows.count % kGzipWindow != 0) {
      return Bad("the windows of plan {} are {} bytes, not a multiple of {}", p, rec.windows.count,
                 kGzipWindow);
    }
    return Ok{};
  }

  Status CheckArray(const ArrayRef& a, size_t record_size, const char* what, uint64_t p) {
    const size_t size = bytes_.size();
    if (a.offset % 8 != 0 || a.offset < sizeof(PlanHeader) || a.offset > size ||
        a.count > (size - a.offset) / record_size) {
      return Bad("the {} of plan {} lie outside the file", what, p);
    }
    return Ok{};
  }

  // Checked by CheckArray: the array lies inside the file.
  template <typename T>
  std::vector<T> Copy(const ArrayRef& a) const {
    std::vector<T> items(a.count);
    if (a.count > 0) std::memcpy(items.data(), bytes_.data() + a.offset, a.count * sizeof(T));
    return items;
  }

  Status CheckParts(const DecodePlan& plan, uint64_t p) {
    for (size_t k = 0; k < plan.parts.size(); ++k) {
      const ZipPart& part = plan.parts[k];
      if (part.reserved != 0) return Bad("part {} of plan {} has reserved bytes set", k, p);
      if (part.method != 0 && part.method != 8) {
        return Bad("part {} of plan {} has method {}, neither stored (0) nor deflated (8)", k, p,
                   part.method);
      }
      if (part.method == 0 && part.stored_size != part.size) {
        return Bad("part {} of plan {} is stored, yet its {} stored bytes make {}", k, p,
                   part.stored_size, part.size);
      }
    }
    return Ok{};
  }

  Status CheckPoints(const DecodePlan& plan, uint64_t p) {
    const uint64_t windows = plan.windows.size() / kGzipWindow;
    for (size_t k = 0; k < plan.points.size(); ++k) {
      const GzipPoint& pt = plan.points[k];
      if (pt.reserved != 0 || pt.member > 1) {
        return Bad("point {} of plan {} has reserved bits set", k, p);
      }
      if (pt.bits > 7) return Bad("point {} of plan {} has {} bits to feed, over 7", k, p, pt.bits);
      if (pt.bits > 0 && pt.in == 0) {
        return Bad("point {} of plan {} feeds bits of a byte before the archive's start", k, p);
      }
      if (pt.in > plan.stored_size) {
        return Bad("point {} of plan {} lies past the archive's end", k, p);
      }
      if (pt.out > plan.decoded_size) {
        return Bad("point {} of plan {} lies past the decoded end ({})", k, p, plan.decoded_size);
      }
      if (pt.member == 1 && (pt.bits != 0 || pt.window != kNoWindow)) {
        return Bad("point {} of plan {} starts a gzip member, yet has bits or a window", k, p);
      }
      if (pt.window != kNoWindow && pt.window >= windows) {
        return Bad("point {} of plan {} names window {} of {}", k, p, pt.window, windows);
      }
      if (k > 0 && pt.out < plan.points[k - 1].out) {
        return Bad("point {} of plan {} comes before point {}: points are sorted by output", k, p,
                   k - 1);
      }
    }
    return Ok{};
  }

  Status CheckRecipes(const DecodePlan& plan, uint64_t p) {
    uint64_t end = 0;  // of the recipe before
    for (size_t r = 0; r < plan.recipes.size(); ++r) {
      const DecodeRecipe& x = plan.recipes[r];
      if (!IsZero(x.reserved) || x.reserved2 != 0) {
        return Bad("recipe {} of plan {} has reserved bytes set", r, p);
      }
      if (x.size == 0 || x.size > kMaxRecipeSize) {
        return Bad("recipe {} of plan {} makes {} bytes, where a recipe makes 1 byte to 1 GiB", r,
                   p, x.size);
      }
      if (x.offset < end) {
        return Bad("recipe {} of plan {} starts at {}, before the one before it ends ({})", r, p,
                   x.offset, end);
      }
      if (x.offset > plan.decoded_size || x.size > plan.decoded_size - x.offset) {
        return Bad("recipe {} of plan {} ends past the decoded end ({})", r, p, plan.decoded_size);
      }
      if (x.stored_offset > plan.stored_size ||
          x.stored_size > plan.stored_size - x.stored_offset) {
        return Bad("recipe {} of plan {} reads past the archive's end", r, p);
      }
      if (Status s = CheckRecipeKind(plan, x, r, p); !s) return s;
      end = x.offset + x.size;
    }
    return Ok{};
  }

  Status CheckRecipeKind(const DecodePlan& plan, const DecodeRecipe& x, size_t r, uint64_t p) {
    const bool zip = plan.kind == DecodeKind::kZip;
    switch (x.kind) {
      case DecodeKind::kAsStored:
        if (!zip) return Bad("recipe {} of plan {} serves bytes as stored in a gzip stream", r, p);
        if (x.offset != x.stored_offset || x.size != x.stored_size) {
          return Bad("recipe {} of plan {} serves bytes as stored, yet moves or resizes them", r,
                     p);
        }
        return Ok{};
      case DecodeKind::kZip:
        if (!zip) return Bad("recipe {} of plan {} is a zip recipe in a gzip plan", r, p);
        return CheckZipRecipe(plan, x, r, p);
      case DecodeKind::kGzip:
        if (zip) return Bad("recipe {} of plan {} is a gzip recipe in a zip plan", r, p);
        return CheckGzipRecipe(plan, x, r, p);
    }
    return Bad("recipe {} of plan {} is of kind {}, which is none", r, p, static_cast<int>(x.kind));
  }

  Status CheckZipRecipe(const DecodePlan& plan, const DecodeRecipe& x, size_t r, uint64_t p) {
    const uint64_t first = x.first;
    const uint64_t last = first + x.count;
    if (x.count == 0 || last > plan.parts.size()) {
      return Bad("recipe {} of plan {} names parts {} to {} of {}", r, p, first, last,
                 plan.parts.size());
    }
    uint64_t left = x.size;
    for (uint64_t k = first; k < last; ++k) {
      const ZipPart& part = plan.parts[k];
      if (part.size > left) return Bad("recipe {} of plan {} has parts past its size", r, p);
      left -= part.size;
      const uint64_t at = part.data_offset - x.stored_offset;
      if (part.data_offset < x.stored_offset || at > x.stored_size ||
          part.stored_size > x.stored_size - at) {
        return Bad("part {} of recipe {} of plan {} lies outside the recipe's stored range", k, r,
                   p);
      }
    }
    if (left != 0) {
      return Bad("recipe {} of plan {} makes {} bytes, and its parts {}", r, p, x.size,
                 x.size - left);
    }
    return Ok{};
  }

  Status CheckGzipRecipe(const DecodePlan& plan, const DecodeRecipe& x, size_t r, uint64_t p) {
    if (x.count != 0) return Bad("recipe {} of plan {} is a gzip recipe with parts", r, p);
    if (x.first >= plan.points.size()) {
      return Bad("recipe {} of plan {} starts from point {} of {}", r, p, x.first,
                 plan.points.size());
    }
    const GzipPoint& pt = plan.points[x.first];
    if (pt.out > x.offset) {
      return Bad("recipe {} of plan {} starts at {}, before its point {} ({})", r, p, x.offset,
                 x.first, pt.out);
    }
    const uint64_t from = pt.in - (pt.bits > 0 ? 1 : 0);  // CheckPoints: in >= 1 with bits
    if (x.stored_offset != from) {
      return Bad("recipe {} of plan {} reads from {}, and its point {} from {}", r, p,
                 x.stored_offset, x.first, from);
    }
    return Ok{};
  }

  template <typename... Args>
  Error Bad(fmt::format_string<Args...> format, Args&&... args) const {
    return Error{EINVAL, Message(format, std::forward<Args>(args)...)};
  }

  template <typename... Args>
  Error Stale(fmt::format_string<Args...> format, Args&&... args) const {
    return Error{kStalePlanFile, Message(format, std::forward<Args>(args)...)};
  }

  template <typename... Args>
  std::string Message(fmt::format_string<Args...> format, Args&&... args) const {
    return fmt::format("cannot use plan file {}: {}", label_,
                       fmt::format(format, std::forward<Args>(args)...));
  }

  std::string_view bytes_;
  std::string_view label_;
  const std::vector<uint64_t>& blob_sizes_;
};

}  // namespace

std::string PlanFileBytes(const std::vector<DecodePlan>& plans, uint64_t index_checksum,
                          const SourceStamp& source) {
  std::vector<const DecodePlan*> order;
  for (const DecodePlan& plan : plans) order.push_back(&plan);
  std::stable_sort(order.begin(), order.end(),
                   [](const DecodePlan* a, const DecodePlan* b) { return a->blob < b->blob; });
  std::string bytes(sizeof(PlanHeader) + plans.size() * sizeof(PlanRecord), '\0');
  std::vector<PlanRecord> records;
  for (const DecodePlan* plan : order) records.push_back(AppendPlan(bytes, *plan));
  if (!records.empty()) {
    std::memcpy(bytes.data() + sizeof(PlanHeader), records.data(),
                records.size() * sizeof(PlanRecord));
  }
  PlanHeader h{};
  std::memcpy(h.magic, kPlanMagic, sizeof(kPlanMagic));
  h.version = kPlanFileVersion;
  h.header_size = sizeof(PlanHeader);
  h.file_size = bytes.size();
  h.body_checksum = XXH3_64bits(bytes.data() + sizeof(h), bytes.size() - sizeof(h));
  h.index_checksum = index_checksum;
  h.source_size = source.size;
  h.source_mtime_ns = source.mtime_ns;
  h.plan_count = plans.size();
  h.header_checksum = HeaderChecksum(h);
  std::memcpy(bytes.data(), &h, sizeof(h));
  return bytes;
}

Result<std::vector<DecodePlan>> ReadPlanFile(std::string_view bytes, std::string_view label,
                                             uint64_t index_checksum, const SourceStamp& source,
                                             const std::vector<uint64_t>& blob_sizes) {
  PlanReader reader(bytes, label, blob_sizes);
  auto header = reader.CheckHeader(index_checksum, source);
  if (!header) return header.error();
  std::vector<DecodePlan> plans;
  plans.reserve(header->plan_count);
  for (uint64_t p = 0; p < header->plan_count; ++p) {
    auto plan = reader.ReadPlan(p, plans.empty() ? nullptr : &plans.back());
    if (!plan) return plan.error();
    plans.push_back(std::move(*plan));
  }
  return plans;
}

}  // namespace gpufs
