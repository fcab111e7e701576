#include "cache/cache_tier.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cache/tier/tier_stat.h"

namespace gpufs {
namespace {

constexpr size_t kStagingPiece = 2 << 20;
// Write-backs at once: two keep a local disk busy.
constexpr unsigned kWriters = 2;

}  // namespace

size_t GroupSpan(const Catalog& catalog, const BlobSource& source, uint32_t group,
                 uint64_t* start) {
  const GroupExtent& g = catalog.Group(group);
  const uint64_t align = source.Alignment();
  *start = g.offset / align * align;
  const uint64_t end = (g.offset + g.size + align - 1) / align * align;
  return static_cast<size_t>(end - *start);
}

CacheTier::CacheTier(const Catalog& catalog, BlobSource& source, DiskTier& tier,
                     const CacheOptions& options, size_t arena_bytes, MemberChecks* checks,
                     CacheCounters& counters, TierStager::Check intact)
    : catalog_(catalog),
      source_(source),
      tier_(tier),
      whole_groups_(options.whole_groups),
      checks_(checks),
      counters_(counters),
      digests_(options.digests) {
  for (uint32_t g = 0; g < catalog.group_count(); ++g) {
    uint64_t start = 0;
    const size_t length = GroupSpan(catalog, source, g, &start);
    const uint32_t blob = catalog.Group(g).blob;
    names_.push_back(TierFileName(g, source.Describe(blob), source.Identity(blob), start, length));
  }
  if (!digests_ && catalog.has_sha256()) {
    auto digests = MemberDigests::FromCatalog(catalog);
    if (digests) digests_ = std::move(*digests);
    if (!digests) spdlog::warn("disk cache copies are not served: {}", digests.error().message);
  }
  if (catalog.has_sha256()) {
    hashed_ = std::make_unique<std::atomic<uint64_t>[]>((catalog.file_count() + 63) / 64);
  }
  StartStager(options, arena_bytes, std::move(intact));
  write_queued_.assign(catalog.group_count(), false);
  for (unsigned i = 0; i < kWriters; ++i) writers_.emplace_back([this] { WriterLoop(); });
}

CacheTier::~CacheTier() {
  StopWrites();
  stager_.reset();
}

std::optional<Result<CachedBytes>> CacheTier::ReadMember(NodeId file, uint64_t offset, size_t size,
                                                         ServedFrom* served_from) {
  const FileExtent& f = catalog_.Extent(file);
  const std::string& name = names_[f.group];
  if (name.empty()) return std::nullopt;
  const bool verify = checks_ && !checks_->Verified(catalog_.FileIndex(file));
  const uint32_t index = catalog_.FileIndex(file);
  const uint64_t bit = uint64_t{1} << (index % 64);
  const bool hash = hashed_ && (hashed_[index / 64].load(std::memory_order_relaxed) & bit) == 0;
  const bool whole = verify || hash;  // to check, the whole member
  const uint64_t from = whole ? 0 : offset;
  const size_t length = whole ? static_cast<size_t>(f.size) : size;
  uint64_t start = 0;
  GroupSpan(catalog_, source_, f.group, &start);
  auto bytes = std::make_unique_for_overwrite<char[]>(std::max<size_t>(length, 1));
  const uint64_t at = f.offset + from - start;  // in the group's span
  auto read_copy = [&] {
    return tier_.ReadSlice(name, at, length, bytes.get()) &&
           (!hash || Trusted(f.group, f.offset, bytes.get(), length));
  };
  bool on_disk = read_copy();
  if (!on_disk) {
    // Bytes from the staging came from the source, as a member read's would. A staging
    // that ended between the two looks has just written the copy: read that instead of
    // fetching the member again.
    const bool staging = whole_groups_ && stager_->Stage(f.group);
    const bool staged = staging && stager_->Read(f.group, at, length, bytes.get());
    if (!staged && !(staging && (on_disk = read_copy()))) return std::nullopt;
  }
  if (on_disk && hash) hashed_[index / 64].fetch_or(bit, std::memory_order_relaxed);
  *served_from = on_disk ? ServedFrom::kDiskTier : ServedFrom::kSourceGroup;
  if (verify) {
    const std::string blob = source_.Describe(catalog_.Group(f.group).blob);
    if (Status s = checks_->Check(catalog_, file, bytes.get(), blob); !s) {
      ++counters_.io_errors;
      return Result<CachedBytes>(s.error());
    }
  }
  ++counters_.member_reads;
  counters_.bytes_served += size;
  return Result<CachedBytes>(CachedBytes::Owned(std::move(bytes), offset - from, size));
}

bool CacheTier::ReadGroup(uint32_t group, char* target, size_t length, const char* group_bytes) {
  const GroupExtent& g = catalog_.Group(group);
  return tier_.ReadWhole(names_[group], target, length) &&
         Trusted(group, g.offset, group_bytes, g.size);
}

bool CacheTier::WriteBack(uint32_t group, const char* bytes, size_t length,
                          std::function<void()> written) {
  std::lock_guard lock(write_mu_);
  if (writes_stop_ || !Keeps(group) || write_queued_[group] ||
      write_jobs_.size() >= kMaxWriteBacks) {
    return false;
  }
  write_queued_[group] = true;
  write_jobs_.push_back(WriteJob{group, bytes, length, std::move(written)});
  write_wake_.notify_one();
  return true;
}

void CacheTier::StopWrites() {
  {
    std::lock_guard lock(write_mu_);
    writes_stop_ = true;
  }
  write_wake_.notify_all();
  for (std::thread& t : writers_) t.join();
  writers_.clear();
}

// Writes the queued jobs, those queued before a stop included (their bytes are pinned
// until written), then ends.
void CacheTier::WriterLoop() {
  std::unique_lock lock(write_mu_);
  for (;;) {
    write_wake_.wait(lock, [this] { return writes_stop_ || !write_jobs_.empty(); });
    if (write_jobs_.empty()) return;
    WriteJob job = std::move(write_jobs_.front());
    write_jobs_.pop_front();
    lock.unlock();
    tier_.Write(names_[job.group], job.bytes, job.length);
    job.written();
    lock.lock();
    write_queued_[job.group] = false;
  }
}

// The stager of groups the pinned tier has no room for (tier_staging.h), over the same
// spans and names as the group loads and write-backs.
void CacheTier::StartStager(const CacheOptions& options, size_t arena_bytes,
                            TierStager::Check intact) {
  const size_t block = options.demand_block    ? options.demand_block
                       : options.io_piece != 0 ? std::min<size_t>(options.io_piece, 256 << 10)
                                               : 256 << 10;
  StagingOptions staging;
  staging.block = block;
  // Pieces of at most 2 MiB: a reader's blocks are then more often still queued, and sent
  // first as a request of its own, than inside a long piece it must wait for; 2 MiB still
  // costs a store's connection a few times its round trip.
  const size_t piece =
      std::min<size_t>(options.io_piece ? options.io_piece : kStagingPiece, kStagingPiece);
  staging.piece = std::max(block, piece / block * block);
  staging.reads_in_flight = std::max(1u, options.reads_in_flight);
  // A quarter of the pinned budget, within 128-256 MiB: several groups staged at once, so
  // that most readers find their group staging rather than queued.
  staging.budget = options.staging_budget
                       ? options.staging_budget
                       : std::clamp<size_t>(arena_bytes / 4, 128 << 20, 256 << 20);
  std::vector<StagedSpan> spans(catalog_.group_count());
  for (uint32_t g = 0; g < spans.size(); ++g) {
    const GroupExtent& group = catalog_.Group(g);
    spans[g].blob = group.blob;
    spans[g].length = GroupSpan(catalog_, source_, g, &spans[g].start);
    spans[g].need = static_cast<size_t>(group.offset + group.size - spans[g].start);
    spans[g].name = names_[g];
  }
  auto check = [this, intact = std::move(intact)](uint32_t group, const char* span) {
    uint64_t start = 0;
    GroupSpan(catalog_, source_, group, &start);
    return intact(group, span + (catalog_.Group(group).offset - start));
  };
  stager_ = std::make_unique<TierStager>(source_, tier_, std::move(spans), staging,
                                         std::move(check), &counters_.bytes_from_source);
}

bool CacheTier::Trusted(uint32_t group, uint64_t offset, const char* bytes, size_t length) {
  if (!catalog_.has_sha256()) return true;  // nothing stronger than the tier's own sums
  if (!digests_) return false;
  const auto bad = digests_->Mismatches(catalog_.Group(group).blob, offset, bytes, length);
  if (bad.empty()) return true;
  tier_.Reject(names_[group],
               fmt::format("{} of its files do not match the SHA-256 of the index, {} first",
                           bad.size(), bad.front().path));
  return false;
}

std::vector<bool> CacheTier::Groups() const {
  std::vector<bool> present(catalog_.group_count(), false);
  for (uint32_t g = 0; g < present.size(); ++g) present[g] = tier_.Present(names_[g]);
  return present;
}

nlohmann::json CacheTier::Stats() const {
  nlohmann::json j = tier_.Stats();
  const nlohmann::json staging = stager_->Stats();
  j[tier_stat::kFills] = staging[staging_stat::kStaged];
  j[tier_stat::kStaging] = staging;
  return j;
}

}  // namespace gpufs
