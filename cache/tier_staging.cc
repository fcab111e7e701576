// Staging groups into the disk tier (see tier_staging.h). Its reads are scheduled by a
// GroupLoader, as the group cache's are (cache/load/group_loader.h).
#include "cache/tier_staging.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cache/tier/tier_copy.h"

namespace gpufs {

struct TierStager::Job {
  uint32_t group = 0;
  char* buffer = nullptr;
  size_t capacity = 0;  // of buffer, as the pool counts it
  size_t room = 0;      // the span rounded up to the tier's alignment: what is written
  BlockGrid grid;
  bool failed = false;    // a read failed: the staging ends once none is in flight
  bool settled = false;   // checked and queued for writing, or released
  bool released = false;  // its buffer went back to the pool
  bool written = false;   // handed to the tier, with the room claimed for it
};

TierStager::TierStager(BlobSource& source, DiskTier& tier, std::vector<StagedSpan> spans,
                       StagingOptions options, Check check, std::atomic<uint64_t>* fetched)
    : source_(source),
      tier_(tier),
      spans_(std::move(spans)),
      options_(options),
      check_(std::move(check)),
      fetched_(fetched),
      jobs_(spans_.size()),
      failures_(spans_.size(), 0),
      retry_at_(spans_.size()),
      is_queued_(spans_.size(), false),
      // A fixed window: the prefetch reads in flight are reads_in_flight whatever the demand.
      loader_(LoaderOptions{.block = options_.block,
                            .piece = options_.piece,
                            .window_most = options_.reads_in_flight,
                            .floor = options_.reads_in_flight},
              LoaderCounts{&counters_.demand_reads, &counters_.fetched_bytes},
              [this](const Run& run, bool demand, Result<size_t> got) {
                OnRead(run, demand, std::move(got));
              }) {
  for (unsigned i = 0; i < std::max(1u, options_.writers); ++i) {
    writers_.emplace_back([this] { WriterLoop(); });
  }
}

TierStager::~TierStager() {
  std::unique_lock lock(mu_);
  stop_ = true;
  queued_.clear();
  const std::deque<JobRef> unsent = loader_.Stop();
  changed_.wait(lock, [this] { return loader_.idle(); });
  // Groups with blocks never sent will not land; those landed are still written (a local
  // write each) before the writers stop.
  for (const JobRef& job : unsent) {
    if (!job->settled) Release(job);
  }
  changed_.notify_all();
  lock.unlock();
  for (std::thread& t : writers_) t.join();
  for (auto& [buffer, capacity] : pool_) std::free(buffer);
}

bool TierStager::Stage(uint32_t group) {
  std::unique_lock lock(mu_);
  if (group >= spans_.size() || stop_ || spans_[group].name.empty()) return false;
  if (jobs_[group] || is_queued_[group]) return true;
  if (failures_[group] > 0 && std::chrono::steady_clock::now() < retry_at_[group]) return false;
  if (tier_.Full()) {
    ++counters_.full_skips;
    return false;
  }
  is_queued_[group] = true;
  queued_.push_back(group);
  Pump(lock);
  return true;
}

bool TierStager::Staging(uint32_t group) const {
  std::lock_guard lock(mu_);
  return jobs_[group] || is_queued_[group];
}

bool TierStager::Read(uint32_t group, uint64_t offset, size_t size, char* out) {
  std::unique_lock lock(mu_);
  const JobRef job = jobs_[group];
  if (!job || job->failed || size == 0 || offset + size > spans_[group].length) return false;
  const std::pair<uint32_t, uint32_t> blocks = loader_.BlocksOf(offset, size);
  const uint32_t first = blocks.first, last = blocks.second;
  auto landed = [&] { return job->grid.Landed(first, last + 1); };
  if (!landed()) {
    loader_.Demand(job, first, last);
    Pump(lock);
    changed_.wait(lock, [&] { return job->failed || stop_ || job->released || landed(); });
    // Written and released before this reader woke: its buffer is gone (the caller reads
    // the copy on disk, or the source).
    if (job->released || !landed()) return false;
  }
  std::memcpy(out, job->buffer + offset, size);  // under mu_: the buffer stays the job's
  ++counters_.served;
  return true;
}

// Under mu_, released while submitting.
void TierStager::Pump(std::unique_lock<std::mutex>& lock) {
  const bool pumped = loader_.Pump(source_, lock, [this] {
    if (stop_) return false;
    StartJobs();
    return true;
  });
  if (pumped) {
    changed_.notify_all();  // the destructor waits for the pump to stop
  }
}

// Under mu_: queued groups start while their buffers fit the budget (one at least, so a
// group larger than the budget is still staged, alone).
void TierStager::StartJobs() {
  while (!queued_.empty()) {
    const uint32_t group = queued_.front();
    const StagedSpan& span = spans_[group];
    const size_t room = RoundUp(span.length, DiskTier::kAlign);
    if (in_flight_bytes_ > 0 && in_flight_bytes_ + room > options_.budget) return;
    queued_.pop_front();
    is_queued_[group] = false;
    if (tier_.Present(span.name)) continue;  // kept since the miss that queued it
    // The room on disk is taken before the bytes are fetched: a tier that fills up
    // stops staging at once, rather than after fetching what it then cannot keep.
    if (!tier_.Claim(span.name, span.length)) {
      ++counters_.full_skips;
      continue;
    }
    auto job = std::make_shared<Job>();
    job->group = group;
    job->room = room;
    job->buffer = TakeBuffer(room, &job->capacity);
    if (!job->buffer) {
      tier_.Unclaim(span.name, span.length);
      return;
    }
    in_flight_bytes_ += job->capacity;
    jobs_[group] = job;
    loader_.Start(job, LoadSpan{span.blob, span.start, span.length, span.need, job->buffer});
  }
}

// On a source thread: a run of blocks landed or failed. Any failure fails the staging: its
// readers read their members elsewhere, and the group backs off.
void TierStager::OnRead(const Run& run, bool demand, Result<size_t> got) {
  std::unique_lock lock(mu_);
  Job& job = *run.load;
  const Landing landing = loader_.Complete(run, demand, got);
  if (landing == Landing::kLanded) {
    if (fetched_) *fetched_ += *got;
  } else if (landing != Landing::kDropped) {
    job.failed = true;
    ++counters_.failed;
    Failed(job.group);
  }
  Settle(run.load, lock);
  // Counted out only now: the destructor and the writers wait for this, and Settle unlocks.
  loader_.Retire();
  changed_.notify_all();
  Pump(lock);
}

// Under mu_ (released for the check): a job whose reads all ended is checked and queued
// for writing, or, failed, released.
void TierStager::Settle(const JobRef& job, std::unique_lock<std::mutex>& lock) {
  if (job->settled || job->grid.reads > 0) return;
  if (job->failed) {
    job->settled = true;
    Release(job);
    return;
  }
  if (!job->grid.AllLanded()) return;
  job->settled = true;
  const StagedSpan& span = spans_[job->group];
  // The tier writes whole pages: the padding past the span is zeros too.
  std::memset(job->buffer + span.length, 0, job->room - span.length);
  lock.unlock();  // readers may copy from the landed buffer meanwhile
  const bool intact = !check_ || check_(job->group, job->buffer);
  lock.lock();
  if (!intact) {
    ++counters_.not_kept;
    Failed(job->group);
    Release(job);
    return;
  }
  writes_.push_back(job);
  changed_.notify_all();
}

// Under mu_: the job's staging is over; its buffer goes back to the pool.
void TierStager::Release(const JobRef& job) {
  if (job->released) return;
  job->released = true;
  if (!job->written) tier_.Unclaim(spans_[job->group].name, spans_[job->group].length);
  if (jobs_[job->group] == job) jobs_[job->group].reset();
  in_flight_bytes_ -= job->capacity;
  GiveBuffer(job->buffer, job->capacity);
  job->buffer = nullptr;
}

// Under mu_: the group backs off before it is staged again.
void TierStager::Failed(uint32_t group) {
  const unsigned doublings = std::min<unsigned>(failures_[group], 6);
  failures_[group] = static_cast<uint8_t>(std::min<unsigned>(failures_[group] + 1, 255));
  retry_at_[group] = std::chrono::steady_clock::now() + options_.retry_after * (1u << doublings);
}

void TierStager::WriterLoop() {
  std::unique_lock lock(mu_);
  for (;;) {
    changed_.wait(lock, [this] { return !writes_.empty() || (stop_ && loader_.idle()); });
    if (writes_.empty()) return;
    const JobRef job = writes_.front();
    writes_.pop_front();
    const StagedSpan& span = spans_[job->group];
    lock.unlock();
    const bool kept = tier_.Write(span.name, job->buffer, span.length, true);
    lock.lock();
    job->written = true;  // the claim is used, or given back by Write
    ++(kept ? counters_.staged : counters_.not_kept);
    if (kept) failures_[job->group] = 0;
    Release(job);
    changed_.notify_all();
    if (!stop_) Pump(lock);  // the budget has room for the next queued group
  }
}

// Under mu_: an aligned buffer of at least `bytes`, the smallest pooled one that fits, or
// a new one. Never zeroed: every byte is overwritten before it is written out.
char* TierStager::TakeBuffer(size_t bytes, size_t* capacity) {
  auto best = pool_.end();
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if (it->second >= bytes && (best == pool_.end() || it->second < best->second)) best = it;
  }
  if (best != pool_.end()) {
    char* buffer = best->first;
    *capacity = best->second;
    pooled_bytes_ -= best->second;
    pool_.erase(best);
    return buffer;
  }
  *capacity = bytes;
  return static_cast<char*>(std::aligned_alloc(DiskTier::kAlign, bytes));
}

// Under mu_: keeps a budget's worth of buffers for the next groups; frees the rest.
void TierStager::GiveBuffer(char* buffer, size_t capacity) {
  if (!buffer) return;
  if (pooled_bytes_ + capacity > options_.budget) {
    std::free(buffer);
    return;
  }
  pool_.emplace_back(buffer, capacity);
  pooled_bytes_ += capacity;
}

nlohmann::json TierStager::Stats() const {
  std::lock_guard lock(mu_);
  nlohmann::json j{{staging_stat::kBudget, options_.budget},
                   {staging_stat::kInFlight, in_flight_bytes_},
                   {staging_stat::kQueued, queued_.size()}};
  PutCounts(j, staging_stat::kCounterFigures, counters_);
  return j;
}

}  // namespace gpufs
