// The group cache's side of the disk tier: member reads served from a group's copy on
// disk or from its staging, the stager that fills the tier with the groups the pinned tier
// has no room for, and the write-backs of groups loaded into the pinned tier (see
// group_cache.h).
#include <cstdlib>

#include <fmt/format.h>

#include "cache/group_cache.h"
#include "dataset/format/checksums.h"

namespace gpufs {
namespace {

// Write-backs beyond this are dropped: each holds its group pinned.
constexpr size_t kMaxWriteBacks = 16;
constexpr size_t kStagingPiece = 2 << 20;

}  // namespace

// Outside mu_: the member from its group's copy on disk, checked; or, while its group is
// being staged into the tier, from the staging buffer (its blocks sent first). nullopt
// when neither has it (the caller reads the member from the source). A miss stages the
// group, so that the next epoch finds it on disk.
std::optional<Result<CachedBytes>> GroupCache::ReadMemberFromTier(NodeId file, uint64_t offset,
                                                                  size_t size,
                                                                  ServedFrom* served_from) {
  const FileExtent& f = catalog_.Extent(file);
  const std::string& name = tier_names_[f.group];
  if (name.empty()) return std::nullopt;
  const bool verify = checks_ && !checks_->Verified(catalog_.FileIndex(file));
  const uint32_t index = catalog_.FileIndex(file);
  const uint64_t bit = uint64_t{1} << (index % 64);
  const bool hash =
      tier_hashed_ && (tier_hashed_[index / 64].load(std::memory_order_relaxed) & bit) == 0;
  const bool whole = verify || hash;  // to check, the whole member
  const uint64_t from = whole ? 0 : offset;
  const size_t length = whole ? static_cast<size_t>(f.size) : size;
  uint64_t start = 0;
  SpanOf(f.group, &start);
  auto bytes = std::make_unique_for_overwrite<char[]>(std::max<size_t>(length, 1));
  const uint64_t at = f.offset + from - start;  // in the group's span
  auto read_copy = [&] {
    return tier_->ReadSlice(name, at, length, bytes.get()) &&
           (!hash || TierCopyTrusted(f.group, f.offset, bytes.get(), length));
  };
  bool on_disk = read_copy();
  if (!on_disk) {
    // Bytes from the staging came from the source, as a member read's would. A staging
    // that ended between the two looks has just written the copy: read that instead of
    // fetching the member again.
    const bool staging = options_.whole_groups && stager_ && stager_->Stage(f.group);
    const bool staged = staging && stager_->Read(f.group, at, length, bytes.get());
    if (!staged && !(staging && (on_disk = read_copy()))) return std::nullopt;
  }
  if (on_disk && hash) tier_hashed_[index / 64].fetch_or(bit, std::memory_order_relaxed);
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

// The stager of groups the pinned tier has no room for (tier_staging.h), over the same
// spans and names as the group loads and write-backs.
void GroupCache::StartStager() {
  const size_t block = options_.demand_block    ? options_.demand_block
                       : options_.io_piece != 0 ? std::min<size_t>(options_.io_piece, 256 << 10)
                                                : 256 << 10;
  StagingOptions staging;
  staging.block = block;
  // Pieces of at most 2 MiB: a reader's blocks are then more often still queued, and sent
  // first as a request of its own, than inside a long piece it must wait for; 2 MiB still
  // costs a store's connection a few times its round trip.
  const size_t piece =
      std::min<size_t>(options_.io_piece ? options_.io_piece : kStagingPiece, kStagingPiece);
  staging.piece = std::max(block, piece / block * block);
  staging.reads_in_flight = std::max(1u, options_.reads_in_flight);
  // A quarter of the pinned budget, within 128-256 MiB: several groups staged at once, so
  // that most readers find their group staging rather than queued.
  staging.budget = options_.staging_budget
                       ? options_.staging_budget
                       : std::clamp<size_t>(arena_.capacity() / 4, 128 << 20, 256 << 20);
  std::vector<StagedSpan> spans(catalog_.group_count());
  for (uint32_t g = 0; g < spans.size(); ++g) {
    const GroupExtent& group = catalog_.Group(g);
    spans[g].blob = group.blob;
    spans[g].length = SpanOf(g, &spans[g].start);
    spans[g].need = static_cast<size_t>(group.offset + group.size - spans[g].start);
    spans[g].name = tier_names_[g];
  }
  auto check = [this](uint32_t group, const char* span) {
    uint64_t start = 0;
    SpanOf(group, &start);
    return IntactGroup(group, span + (catalog_.Group(group).offset - start));
  };
  stager_ = std::make_unique<TierStager>(source_, *tier_, std::move(spans), staging,
                                         std::move(check), &counters_.bytes_from_disk);
}

// Under mu_. A write-back pins its group until written (groups without room in the
// pinned tier are staged instead: tier_staging.h). At unmount a load that lands its last
// pieces is still written back.
void GroupCache::QueueTierJob(uint32_t group, bool write_back) {
  if (!write_back || tier_queued_[group] || failed_[group] || tier_stop_ ||
      tier_names_[group].empty() || tier_jobs_.size() >= kMaxWriteBacks) {
    return;
  }
  tier_queued_[group] = true;
  ++entries_[group]->pins;
  busy_[group] = true;
  tier_jobs_.push_back(TierJob{group, true});
  tier_wake_.notify_one();
}

void GroupCache::TierLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    tier_wake_.wait(lock, [this] { return tier_stop_ || !tier_jobs_.empty(); });
    if (tier_jobs_.empty()) {
      if (tier_stop_) return;
      continue;
    }
    const TierJob job = tier_jobs_.front();
    tier_jobs_.pop_front();
    Entry& entry = *entries_[job.group];  // pinned: neither evicted nor moved
    const char* bytes = arena_.base() + entry.arena_offset;
    const size_t length = entry.arena_bytes;
    lock.unlock();
    tier_->Write(tier_names_[job.group], bytes, length);
    lock.lock();
    if (--entry.pins == 0) busy_[job.group] = false;
    changed_.notify_all();
    tier_queued_[job.group] = false;
  }
}

// Whether a whole-blob group matches the blob's checksum, where the index has one.
bool GroupCache::IntactGroup(uint32_t group, const char* bytes) const {
  if (!HasBlobCheck(group)) return true;
  const GroupExtent& g = catalog_.Group(group);
  return ChecksumOf(bytes, g.size) == source_.Expected(g.blob)->checksum;
}

bool GroupCache::TierCopyTrusted(uint32_t group, uint64_t offset, const char* bytes,
                                 size_t length) {
  if (!catalog_.has_sha256()) return true;  // nothing stronger than the tier's own sums
  const std::string& name = tier_names_[group];
  if (!tier_digests_) return false;
  const auto bad = tier_digests_->Mismatches(catalog_.Group(group).blob, offset, bytes, length);
  if (bad.empty()) return true;
  tier_->Reject(name, fmt::format("{} of its files do not match the SHA-256 of the index, {} first",
                                  bad.size(), bad.front().path));
  return false;
}

bool GroupCache::Staging(uint32_t group) const { return stager_ && stager_->Staging(group); }

std::vector<bool> GroupCache::TierGroups() const {
  std::vector<bool> present(catalog_.group_count(), false);
  if (!tier_) return present;
  for (uint32_t g = 0; g < present.size(); ++g) present[g] = tier_->Present(tier_names_[g]);
  return present;
}

}  // namespace gpufs
