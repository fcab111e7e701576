#include "cache/miss_reads.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace gpufs {
namespace {

// A file of a group read ahead that is not in the page cache this long after counts as
// let go; sooner, its group's read may still be on its way.
constexpr uint32_t kSettleMs = 2000;
// Files looked up in the page cache before the measured share replaces the predicted one.
constexpr uint64_t kMeasuredAfter = 64;

uint64_t SteadyNs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

MissReadShape ShapeOf(const Catalog& catalog, const BlobSource& source, double request_bytes) {
  MissReadShape shape;
  const double files = std::max<double>(1, static_cast<double>(catalog.file_count()));
  const double groups = std::max<double>(1, static_cast<double>(catalog.group_count()));
  shape.file_bytes = static_cast<double>(catalog.total_bytes()) / files;
  shape.files_per_group = files / groups;
  shape.group_bytes = shape.file_bytes * shape.files_per_group;
  shape.part_bytes = static_cast<double>(source.PartSize());
  shape.request_bytes = request_bytes;
  return shape;
}

// The name's own spelling, so that the view kept outlives the option's string.
std::string_view Canonical(std::string_view mode) {
  for (std::string_view name : miss_read_name::kAll) {
    if (name == mode) return name;
  }
  return miss_read_name::kAuto;
}

}  // namespace

MissReadCost CostOf(const MissReadShape& shape, double kept) {
  const double requests =
      shape.part_bytes > 0 ? std::ceil(shape.group_bytes / shape.part_bytes) : 1.0;
  const double served = 1 + std::max(0.0, shape.files_per_group - 1) * std::clamp(kept, 0.0, 1.0);
  return {shape.request_bytes + shape.file_bytes,
          (shape.group_bytes + requests * shape.request_bytes) / served};
}

double PredictedKept(uint64_t dataset_bytes, uint64_t budget_bytes, uint64_t page_cache_bytes) {
  if (dataset_bytes <= budget_bytes) return 1;
  return std::min(1.0, static_cast<double>(page_cache_bytes) /
                           static_cast<double>(dataset_bytes - budget_bytes));
}

MissReads::MissReads(const Catalog& catalog, BlobSource& source, Config config)
    : catalog_(catalog),
      source_(source),
      mode_(Canonical(config.mode)),
      device_(source.PageCacheShape()),
      shape_(ShapeOf(catalog, source, device_ ? device_->break_even_bytes : 0)),
      kept_predicted_(
          PredictedKept(catalog.total_bytes(), config.budget_bytes, config.page_cache_bytes)),
      ahead_epoch_(std::make_unique<std::atomic<uint32_t>[]>(catalog.group_count())),
      ahead_at_ms_(std::make_unique<std::atomic<uint32_t>[]>(catalog.group_count())),
      started_ns_(SteadyNs()) {
  for (uint32_t g = 0; g < catalog.group_count(); ++g) {
    ahead_epoch_[g].store(0, std::memory_order_relaxed);
    ahead_at_ms_[g].store(0, std::memory_order_relaxed);
  }
  Decide();
}

uint32_t MissReads::NowMs() const {
  return static_cast<uint32_t>((SteadyNs() - started_ns_) / 1000000);
}

double MissReads::Kept() const {
  const uint64_t hits = hits_.load(std::memory_order_relaxed);
  const uint64_t looked = hits + misses_.load(std::memory_order_relaxed);
  if (looked < kMeasuredAfter) return kept_predicted_;
  return static_cast<double>(hits) / static_cast<double>(looked);
}

void MissReads::Decide() {
  bool groups = mode_ == miss_read_name::kGroups;
  if (mode_ == miss_read_name::kAuto) {
    const MissReadCost cost = CostOf(shape_, Kept());
    groups = cost.group < cost.alone;
  }
  groups_.store(device_.has_value() && groups, std::memory_order_relaxed);
}

Result<CachedBytes> MissReads::Read(NodeId file, uint64_t offset, size_t size, MemberChecks* checks,
                                    uint32_t epoch) {
  if (!device_) return ReadMemberBytes(source_, catalog_, file, offset, size, checks);
  return ReadMemberBytes(source_, catalog_, file, offset, size, checks,
                         [&](uint32_t blob, uint64_t at, size_t length, char* buffer) {
                           return ReadThrough(file, epoch, blob, at, length, buffer);
                         });
}

// From the page cache when it holds every byte; else the group is read ahead (the first
// time this epoch, while groups are the choice) and the file read as it lands.
Status MissReads::ReadThrough(NodeId file, uint32_t epoch, uint32_t blob, uint64_t at,
                              size_t length, char* buffer) {
  const uint32_t group = catalog_.Extent(file).group;
  uint32_t ahead = ahead_epoch_[group].load(std::memory_order_relaxed);
  const bool this_epoch = ahead == epoch + 1;
  if (source_.ReadCached(blob, at, length, buffer)) {
    if (this_epoch) ++hits_;
    if (this_epoch) Decide();
    return Ok{};
  }
  if (this_epoch) {
    if (NowMs() - ahead_at_ms_[group].load(std::memory_order_relaxed) >= kSettleMs) {
      ++misses_;
      Decide();
    }
  } else if (groups() && ahead_epoch_[group].compare_exchange_strong(ahead, epoch + 1)) {
    ReadAhead(group, blob, at);
  }
  return ReadExactly(source_, ReadKind::kMember, blob, at, length, buffer, catalog_.PathOf(file));
}

void MissReads::ReadAhead(uint32_t group, uint32_t blob, uint64_t first) {
  const GroupExtent& g = catalog_.Group(group);
  ahead_at_ms_[group].store(NowMs(), std::memory_order_relaxed);
  if (!source_.Readahead(blob, g.offset, static_cast<size_t>(g.size), first)) {
    ahead_epoch_[group].store(0, std::memory_order_relaxed);  // none started: a later file may
    return;
  }
  ++groups_ahead_;
  bytes_ahead_ += g.size;
}

nlohmann::json MissReads::Stats() const {
  using namespace miss_read_stat;
  const uint64_t hits = hits_.load(), misses = misses_.load();
  const MissReadCost cost = CostOf(shape_, Kept());
  nlohmann::json j{
      {kMode, std::string(mode_)},
      {kChoice, std::string(groups() ? miss_read_name::kGroups : miss_read_name::kMembers)},
      {kDevice, device_ ? device_->why : std::string("no page cache to read into")},
      {kBreakEven, shape_.request_bytes},
      {kKeptPredicted, kept_predicted_},
      {kKeptMeasured, nullptr},
      {kCostAlone, cost.alone},
      {kCostGroup, cost.group},
      {kGroupsAhead, groups_ahead_.load()},
      {kBytesAhead, bytes_ahead_.load()},
      {kPageCacheHits, hits},
      {kPageCacheMisses, misses}};
  if (hits + misses >= kMeasuredAfter) {
    j[kKeptMeasured] = static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
  return j;
}

}  // namespace gpufs
