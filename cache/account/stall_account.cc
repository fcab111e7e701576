#include "cache/account/stall_account.h"

namespace gpufs {

StallTotals StallTotals::operator-(const StallTotals& since) const {
  StallTotals d;
  for (size_t i = 0; i < kServedFromCount; ++i) {
    d.reads[i] = reads[i] - since.reads[i];
    d.bytes[i] = bytes[i] - since.bytes[i];
    d.wait_ns[i] = wait_ns[i] - since.wait_ns[i];
    d.fetched[i] = fetched[i] - since.fetched[i];
  }
  d.hit_bytes = hit_bytes - since.hit_bytes;
  d.miss_bytes = miss_bytes - since.miss_bytes;
  d.stalled_ns = stalled_ns - since.stalled_ns;
  d.files = files - since.files;
  d.at_ns = at_ns - since.at_ns;
  return d;
}

uint64_t StallTotals::bytes_served() const {
  uint64_t sum = 0;
  for (uint64_t b : bytes) sum += b;
  return sum;
}

double StallEpoch::StallFraction() const {
  return delta.at_ns ? std::min(1.0, static_cast<double>(delta.stalled_ns) / delta.at_ns) : 0.0;
}

double StallEpoch::DemandMbPerS() const {
  const uint64_t busy = delta.at_ns > delta.stalled_ns ? delta.at_ns - delta.stalled_ns : 0;
  return busy ? delta.bytes_served() / 1e6 / (busy / 1e9) : 0.0;
}

std::optional<double> StallEpoch::HitRatio() const {
  const uint64_t counted = delta.hit_bytes + delta.miss_bytes;
  if (counted == 0) return std::nullopt;
  return static_cast<double>(delta.hit_bytes) / static_cast<double>(counted);
}

nlohmann::json StallEpoch::Json(bool ended) const {
  using namespace stall_stat;
  nlohmann::json from = nlohmann::json::object();
  for (size_t i = 0; i < kServedFromCount; ++i) {
    from[kServedFromNames[i]] = {{kReads, delta.reads[i]},
                                 {kBytes, delta.bytes[i]},
                                 {kWaitS, delta.wait_ns[i] / 1e9},
                                 {kFetched, delta.fetched[i]}};
  }
  const std::optional<double> hit = HitRatio();
  nlohmann::json j{{kEpoch, epoch},
                   {kWallS, delta.at_ns / 1e9},
                   {kStalledS, delta.stalled_ns / 1e9},
                   {kStallFraction, StallFraction()},
                   {kDemandMbPerS, DemandMbPerS()},
                   {kFiles, distinct_files},
                   {kBytesServed, delta.bytes_served()},
                   {kHitBytes, delta.hit_bytes},
                   {kMissBytes, delta.miss_bytes},
                   {kHitRatio, hit ? nlohmann::json(*hit) : nlohmann::json()},
                   {kPeakWaiting, peak_waiting},
                   {kFrom, std::move(from)}};
  j[kNotRequested] = ended ? nlohmann::json(not_requested) : nlohmann::json();
  return j;
}

StallAccount::StallAccount(size_t file_count, size_t group_count, FetchedTotals fetched,
                           Clock clock)
    : file_count_(file_count),
      fetched_(std::move(fetched)),
      clock_(std::move(clock)),
      fetched_in_(new std::atomic<uint32_t>[group_count]()),
      seen_(new std::atomic<uint64_t>[(file_count + 63) / 64]()) {}

uint64_t StallAccount::SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void StallAccount::Fetching(uint32_t group) {
  fetched_in_[group].store(epoch_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

bool StallAccount::FetchedThisEpoch(uint32_t group) const {
  return fetched_in_[group].load(std::memory_order_relaxed) ==
         epoch_.load(std::memory_order_relaxed);
}

void StallAccount::Served(ServedFrom from, uint64_t bytes, uint64_t wait_ns, uint32_t group) {
  if (!running_.load(std::memory_order_relaxed)) {  // a hit may be an epoch's first read
    std::lock_guard lock(mu_);
    Start();
  }
  const bool fetched = FetchedThisEpoch(group);
  if (from == ServedFrom::kMemory && wait_ns == 0) {
    ++memory_reads_;
    (fetched ? memory_miss_bytes_ : memory_hit_bytes_) += bytes;
    return;
  }
  const size_t i = static_cast<size_t>(from);
  reads_[i].fetch_add(1, std::memory_order_relaxed);
  bytes_[i].fetch_add(bytes, std::memory_order_relaxed);
  wait_ns_[i].fetch_add(wait_ns, std::memory_order_relaxed);
  const bool source = from == ServedFrom::kSourceGroup || from == ServedFrom::kSourceMember;
  (source || fetched ? miss_bytes_ : hit_bytes_).fetch_add(bytes, std::memory_order_relaxed);
}

void StallAccount::BeginWait() {
  std::lock_guard lock(mu_);
  Start();
  if (waiting_++ == 0) wait_since_ns_ = Now();
  peak_waiting_ = std::max(peak_waiting_, waiting_);
}

void StallAccount::EndWait() {
  std::lock_guard lock(mu_);
  if (--waiting_ == 0) stalled_ns_ += Now() - wait_since_ns_;
}

// Under mu_: an epoch begins with its first read (every first read of a mount waits; a
// later epoch may begin with a hit), so idle time before it is not its time.
void StallAccount::Start() {
  if (running_.load(std::memory_order_relaxed)) return;
  epoch_start_ = Snapshot();
  peak_waiting_ = waiting_;
  running_.store(true, std::memory_order_relaxed);
}

StallAccount::EpochEvent StallAccount::FileDone(uint32_t file) {
  if (!running_.load(std::memory_order_relaxed)) {
    std::lock_guard lock(mu_);
    Start();
  }
  const uint64_t bit = uint64_t{1} << (file % 64);
  if (!(seen_[file / 64].fetch_or(bit, std::memory_order_relaxed) & bit)) {
    ++files_;
    if (distinct_.fetch_add(1, std::memory_order_relaxed) + 1 < file_count_) return kSame;
    std::lock_guard lock(mu_);
    EndEpoch(false);  // a whole pass: the epoch ends with its last file
    return kEndedWith;
  }
  // Read again once half of the dataset went by (as consume-once counts): the files not
  // read came from the page cache (or were not read), and this one begins the next.
  if (2 * distinct_.load(std::memory_order_relaxed) < file_count_) {
    ++files_;
    return kSame;
  }
  std::lock_guard lock(mu_);
  if (2 * distinct_.load(std::memory_order_relaxed) < file_count_) {  // raced with an end
    ++files_;
    return kSame;
  }
  EndEpoch(true);
  seen_[file / 64].fetch_or(bit, std::memory_order_relaxed);
  distinct_.store(1, std::memory_order_relaxed);
  ++files_;
  return kBegan;
}

// Under mu_: the epoch in progress ends now; with `next`, the next begins at once.
void StallAccount::EndEpoch(bool next) {
  StallTotals now = Snapshot();
  StallEpoch ended;
  ended.epoch = epoch_;
  ended.delta = now - epoch_start_;
  ended.distinct_files = distinct_.load(std::memory_order_relaxed);
  ended.not_requested = file_count_ - std::min<uint64_t>(file_count_, ended.distinct_files);
  ended.peak_waiting = peak_waiting_;
  last_ = ended;
  peak_waiting_ = waiting_;
  for (size_t w = 0; w < (file_count_ + 63) / 64; ++w) seen_[w].store(0, std::memory_order_relaxed);
  distinct_.store(0, std::memory_order_relaxed);
  ++epoch_;
  epoch_start_ = now;
  running_.store(next, std::memory_order_relaxed);
}

// Under mu_: the counters since the mount, an open wait counted up to now.
StallTotals StallAccount::Snapshot() const {
  StallTotals t;
  t.at_ns = Now();
  for (size_t i = 0; i < kServedFromCount; ++i) {
    t.reads[i] = reads_[i].load(std::memory_order_relaxed);
    t.bytes[i] = bytes_[i].load(std::memory_order_relaxed);
    t.wait_ns[i] = wait_ns_[i].load(std::memory_order_relaxed);
  }
  const uint64_t memory_hits = memory_hit_bytes_.load(), memory_misses = memory_miss_bytes_.load();
  t.reads[size_t(ServedFrom::kMemory)] += memory_reads_.load();
  t.bytes[size_t(ServedFrom::kMemory)] += memory_hits + memory_misses;
  t.hit_bytes = hit_bytes_.load(std::memory_order_relaxed) + memory_hits;
  t.miss_bytes = miss_bytes_.load(std::memory_order_relaxed) + memory_misses;
  if (fetched_) t.fetched = fetched_();
  t.stalled_ns = stalled_ns_ + (waiting_ ? t.at_ns - wait_since_ns_ : 0);
  t.files = files_.load();
  return t;
}

uint32_t StallAccount::epoch() const {
  std::lock_guard lock(mu_);
  return epoch_;
}

std::optional<StallEpoch> StallAccount::Last() const {
  std::lock_guard lock(mu_);
  return last_;
}

StallEpoch StallAccount::Current() const {
  std::lock_guard lock(mu_);
  StallEpoch e;
  e.epoch = epoch_;
  if (!running_.load(std::memory_order_relaxed)) return e;  // between epochs
  e.delta = Snapshot() - epoch_start_;
  e.distinct_files = distinct_.load(std::memory_order_relaxed);
  e.peak_waiting = peak_waiting_;
  return e;
}

nlohmann::json StallAccount::Stats() const {
  using namespace stall_stat;
  const StallEpoch current = Current();
  const std::optional<StallEpoch> last = Last();
  StallEpoch totals;
  {
    std::lock_guard lock(mu_);
    totals.delta = Snapshot();
    totals.delta.at_ns = 0;  // cumulative counters have no wall time of their own
  }
  return {{kEpoch, current.epoch},
          {kCurrent, current.Json(false)},
          {kLast, last ? last->Json(true) : nlohmann::json()},
          {kTotals, totals.Json(false)}};
}

}  // namespace gpufs
