#include "cache/miss_reads.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>

namespace gpufs {
namespace {

// Files looked up in the page cache before the measured share replaces the predicted one.
constexpr uint64_t kMeasuredAfter = 64;

MissReadShape DatasetShape(const Catalog& catalog, const BlobSource& source, double request_bytes) {
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

// Set once, by the thread that read ahead; waited for by the reader.
struct Landed {
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
  void Set() {
    std::lock_guard lock(mu);
    set = true;
    cv.notify_all();
  }
  void Wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [this] { return set; });
  }
};

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
      shape_(DatasetShape(catalog, source, device_ ? device_->break_even_bytes : 0)),
      kept_predicted_(
          PredictedKept(catalog.total_bytes(), config.budget_bytes, config.page_cache_bytes)),
      ahead_epoch_(std::make_unique<std::atomic<uint32_t>[]>(catalog.group_count())),
      reading_(std::make_unique<std::atomic<bool>[]>(catalog.group_count())) {
  for (uint32_t g = 0; g < catalog.group_count(); ++g) {
    ahead_epoch_[g].store(0, std::memory_order_relaxed);
    reading_[g].store(false, std::memory_order_relaxed);
  }
  Decide();
}

MissReads::~MissReads() {
  std::unique_lock lock(reading_mu_);
  read_.wait(lock, [this] { return outstanding_ == 0; });  // their `done` calls back here
}

double MissReads::Kept() const {
  const uint64_t hits = counters_.page_cache_hits.load(std::memory_order_relaxed);
  const uint64_t looked = hits + counters_.page_cache_misses.load(std::memory_order_relaxed);
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
// time this epoch, while groups are the choice) and the file taken from the page cache
// once its part has landed, or read alone.
Status MissReads::ReadThrough(NodeId file, uint32_t epoch, uint32_t blob, uint64_t at,
                              size_t length, char* buffer) {
  const uint32_t group = catalog_.Extent(file).group;
  const uint32_t ahead = ahead_epoch_[group].load(std::memory_order_acquire);
  const bool this_epoch = ahead == epoch + 1;
  // Not asked before the group's read ahead: a look that misses starts a read of the
  // file alone (RWF_NOWAIT reads ahead what it does not wait for), in small pages.
  const bool look = this_epoch || !groups();
  if (this_epoch) AwaitReadAhead(group);  // its reads land in large pages: not split
  if (look && source_.ReadCached(blob, at, length, buffer)) {
    if (this_epoch) {
      ++counters_.page_cache_hits;
      Decide();
    }
    return Ok{};
  }
  if (this_epoch) {
    if (!reading_[group].load(std::memory_order_relaxed)) {  // landed, and let go since
      ++counters_.page_cache_misses;
      Decide();
    }
  } else if (groups() && Claim(group, ahead, epoch) && ReadAhead(group, blob, at) &&
             source_.ReadCached(blob, at, length, buffer)) {
    return Ok{};
  }
  return ReadExactly(source_, ReadKind::kMember, blob, at, length, buffer, catalog_.PathOf(file));
}

// One reader reads a group ahead an epoch. Its group shows as on its way (reading_)
// before the epoch's mark does, so that a reader who sees the mark waits for the read.
bool MissReads::Claim(uint32_t group, uint32_t seen, uint32_t epoch) {
  std::lock_guard lock(reading_mu_);
  if (reading_[group].load(std::memory_order_relaxed)) return false;  // still on its way
  reading_[group].store(true, std::memory_order_relaxed);
  if (!ahead_epoch_[group].compare_exchange_strong(seen, epoch + 1, std::memory_order_acq_rel)) {
    reading_[group].store(false, std::memory_order_relaxed);
    return false;
  }
  ++outstanding_;
  return true;
}

// The group into the page cache, waited for until the part holding `first` has landed:
// the device reads it before the rest, and a reader that read it alone meanwhile would
// split the large pages the group is read into.
bool MissReads::ReadAhead(uint32_t group, uint32_t blob, uint64_t first) {
  const GroupExtent& g = catalog_.Group(group);
  auto landed = std::make_shared<Landed>();
  const auto done = [this, group] {
    std::lock_guard lock(reading_mu_);
    reading_[group].store(false, std::memory_order_relaxed);
    --outstanding_;
    read_.notify_all();
  };
  if (!source_.Readahead(
          blob, g.offset, static_cast<size_t>(g.size), first, [landed] { landed->Set(); }, done)) {
    ahead_epoch_[group].store(0, std::memory_order_relaxed);  // none started: a later file may
    done();
    return false;
  }
  ++counters_.groups_ahead;
  counters_.bytes_ahead += g.size;
  landed->Wait();
  return true;
}

// A reader of a group on its way into the page cache waits for it (as a reader of a
// pinned load does), bounded: a device that stalls fails the read that follows instead.
void MissReads::AwaitReadAhead(uint32_t group) {
  if (!reading_[group].load(std::memory_order_relaxed)) return;
  std::unique_lock lock(reading_mu_);
  read_.wait_for(lock, std::chrono::seconds(10),
                 [&] { return !reading_[group].load(std::memory_order_relaxed); });
}

nlohmann::json MissReads::Stats() const {
  using namespace miss_read_stat;
  const MissReadCost cost = CostOf(shape_, Kept());
  nlohmann::json j{
      {kMode, std::string(mode_)},
      {kChoice, std::string(groups() ? miss_read_name::kGroups : miss_read_name::kMembers)},
      {kDevice, device_ ? device_->why : std::string("no page cache to read into")},
      {kBreakEven, shape_.request_bytes},
      {kKeptPredicted, kept_predicted_},
      {kKeptMeasured, nullptr},
      {kCostAlone, cost.alone},
      {kCostGroup, cost.group}};
  PutCounts(j, kCounterFigures, counters_);
  // The share measured from the counts just put, so that the three agree.
  const auto hits = j[kPageCacheHits].get<uint64_t>(), misses = j[kPageCacheMisses].get<uint64_t>();
  if (hits + misses >= kMeasuredAfter) {
    j[kKeptMeasured] = static_cast<double>(hits) / static_cast<double>(hits + misses);
  }
  return j;
}

}  // namespace gpufs
