#include "cache/account/what_if.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "cache/policy/policy.h"

namespace gpufs {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

uint64_t GroupHash(uint32_t group) { return XXH3_64bits(&group, sizeof(group)); }

// Counts and bytes of the sample, scaled back to the whole dataset.
uint64_t Unscaled(uint64_t sampled, double rate) {
  return static_cast<uint64_t>(std::llround(static_cast<double>(sampled) / rate));
}

// Sampled bytes of a whole-dataset size: what a budget holds of the sample.
uint64_t Scaled(uint64_t bytes, double rate) {
  return static_cast<uint64_t>(std::floor(static_cast<double>(bytes) * rate));
}

// The smallest whole-dataset budget whose scaled size holds `sampled` bytes.
uint64_t BudgetFor(uint64_t sampled, double rate) {
  auto budget = static_cast<uint64_t>(std::ceil(static_cast<double>(sampled) / rate));
  while (budget > 0 && Scaled(budget - 1, rate) >= sampled) --budget;
  while (Scaled(budget, rate) < sampled) ++budget;
  return budget;
}

// A Fenwick tree of bytes over access times: the bytes of the groups whose latest access
// lies in a range of times.
class Fenwick {
 public:
  explicit Fenwick(size_t n) : tree_(n + 1, 0) {}
  void Add(size_t at, int64_t delta) {
    for (size_t i = at + 1; i < tree_.size(); i += i & (~i + 1)) tree_[i] += delta;
  }
  // Sum over times [0, at].
  int64_t Prefix(size_t at) const {
    int64_t sum = 0;
    for (size_t i = at + 1; i > 0; i -= i & (~i + 1)) sum += tree_[i];
    return sum;
  }

 private:
  std::vector<int64_t> tree_;
};

// The sampled sub-dataset renumbered densely: the groups and files the traces touch get
// ids 0.., so the replay's state (policy tables included) is the size of the sample, not
// of the dataset. A sampled group keeps all its members in `members` (consume-once counts
// against them), read or not.
struct Sample {
  std::vector<uint32_t> group_of;     // by dense file
  std::vector<uint64_t> file_bytes;   // by dense file
  std::vector<uint64_t> group_bytes;  // by dense group
  GroupSizes members;                 // by dense group
  size_t file_count = 0;              // files of the sampled groups
  std::vector<uint32_t> warmup;       // dense files
  std::vector<uint32_t> measured;     // dense files
};

Sample Densify(const WhatIfShape& shape, const std::vector<uint32_t>& warmup,
               const std::vector<uint32_t>& measured) {
  std::vector<uint32_t> files(warmup);
  files.insert(files.end(), measured.begin(), measured.end());
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  Sample s;
  std::vector<uint32_t> dense_group(shape.group_bytes.size(), kNone);
  for (uint32_t file : files) {
    uint32_t& g = dense_group[shape.file_group[file]];
    if (g == kNone) {
      g = static_cast<uint32_t>(s.group_bytes.size());
      s.group_bytes.push_back(shape.group_bytes[shape.file_group[file]]);
    }
    s.group_of.push_back(g);
    s.file_bytes.push_back(shape.file_bytes[file]);
  }
  s.members.assign(s.group_bytes.size(), 0);
  for (uint32_t group : shape.file_group) {
    if (dense_group[group] == kNone) continue;
    ++s.members[dense_group[group]];
    ++s.file_count;
  }
  auto dense = [&](const std::vector<uint32_t>& trace) {
    std::vector<uint32_t> out;
    out.reserve(trace.size());
    for (uint32_t file : trace) {
      out.push_back(static_cast<uint32_t>(std::lower_bound(files.begin(), files.end(), file) -
                                          files.begin()));
    }
    return out;
  };
  s.warmup = dense(warmup);
  s.measured = dense(measured);
  return s;
}

// The cache's rules over the sample, one read at a time (see what_if.h and the rules of
// GroupCache::Read, Admit and ReadMember): single reader, no prefetch, nothing busy.
class Replayer {
 public:
  Replayer(const Sample& s, std::unique_ptr<EvictionPolicy> policy, uint64_t cache_bytes,
           uint64_t tier_bytes)
      : s_(s),
        policy_(std::move(policy)),
        cache_bytes_(cache_bytes),
        tier_bytes_(tier_bytes),
        in_memory_(s.group_bytes.size(), false),
        on_tier_(s.group_bytes.size(), false),
        fetched_in_(s.group_bytes.size(), 0),
        busy_(s.group_bytes.size(), false) {}

  // Each run is an epoch: a group the source fetched whole in it is a miss for the rest.
  void Run(const std::vector<uint32_t>& trace, WhatIfPoint* point) {
    ++run_;
    for (uint32_t file : trace) Read(file, point);
  }

 private:
  void Read(uint32_t file, WhatIfPoint* p) {
    const uint32_t g = s_.group_of[file];
    const uint64_t file_bytes = s_.file_bytes[file];
    const uint64_t group_bytes = s_.group_bytes[g];
    ++p->reads;
    p->bytes_served += file_bytes;
    bool miss = true;  // the source sent the read's bytes for this epoch
    if (in_memory_[g]) {
      ++p->memory_hits;
      miss = fetched_in_[g] == run_;
    } else if (policy_->Wanted(g) && MakeRoom(group_bytes)) {
      in_memory_[g] = true;
      cached_ += group_bytes;
      policy_->Admitted(g);
      if (on_tier_[g]) {
        ++p->tier_reads;
        p->bytes_from_tier += group_bytes;
        miss = fetched_in_[g] == run_;
      } else {
        ++p->source_reads;
        p->bytes_from_source += group_bytes;
        fetched_in_[g] = run_;
        KeepOnTier(g);  // written back
      }
    } else if (on_tier_[g]) {
      ++p->tier_reads;
      p->bytes_from_tier += file_bytes;
      miss = fetched_in_[g] == run_;
    } else if (KeepOnTier(g)) {  // staged whole; the member is served from the staging
      ++p->source_reads;
      p->bytes_from_source += group_bytes;
      fetched_in_[g] = run_;
    } else {
      ++p->source_reads;
      p->bytes_from_source += file_bytes;
      p->member_bytes_from_source += file_bytes;
    }
    if (miss) p->miss_bytes += file_bytes;
    policy_->Served(g, file);
  }

  // Evicts the policy's victims until `bytes` more fit; false when they cannot. Victims
  // evicted before giving up stay evicted, as in GroupCache::Admit.
  bool MakeRoom(uint64_t bytes) {
    while (cached_ + bytes > cache_bytes_) {
      const std::optional<uint32_t> victim = policy_->Victim(busy_);
      if (!victim) return false;
      in_memory_[*victim] = false;
      cached_ -= s_.group_bytes[*victim];
      policy_->Evicted(*victim);
    }
    return true;
  }

  // A copy on the tier while it has room; a full tier keeps what it has.
  bool KeepOnTier(uint32_t g) {
    if (on_tier_[g] || tier_used_ + s_.group_bytes[g] > tier_bytes_) return false;
    on_tier_[g] = true;
    tier_used_ += s_.group_bytes[g];
    return true;
  }

  const Sample& s_;
  const std::unique_ptr<EvictionPolicy> policy_;
  const uint64_t cache_bytes_;
  const uint64_t tier_bytes_;
  std::vector<bool> in_memory_;
  std::vector<bool> on_tier_;
  std::vector<uint32_t> fetched_in_;  // by group: the run in which the source fetched it whole
  uint32_t run_ = 0;
  const std::vector<bool> busy_;  // all false: a single reader pins nothing meanwhile
  uint64_t cached_ = 0;
  uint64_t tier_used_ = 0;
};

}  // namespace

AccessTrace::AccessTrace(size_t files, size_t /*groups*/, size_t max_entries)
    : max_entries_(max_entries) {
  if (files <= max_entries) return;  // rate 1: every group kept
  // An eighth of headroom: the sample's size varies with which groups the hash keeps, and
  // an epoch cut short at max_entries loses its end.
  rate_ = static_cast<double>(max_entries) / static_cast<double>(files) * 7 / 8;
  threshold_ = static_cast<uint64_t>(std::ldexp(rate_, 64));
}

bool AccessTrace::Sampled(uint32_t group) const {
  return rate_ >= 1.0 || GroupHash(group) < threshold_;
}

void AccessTrace::Record(uint32_t file, uint32_t group) {
  if (!Sampled(group)) return;
  std::lock_guard lock(mu_);
  if (current_.size() >= max_entries_) {
    ++dropped_;  // the sample overshot its rate: the trace's size holds regardless
    return;
  }
  // Grown by hand so the capacity never passes max_entries (memory_bytes' bound).
  if (current_.size() == current_.capacity()) {
    current_.reserve(std::min(max_entries_, std::max<size_t>(1024, 2 * current_.capacity())));
  }
  current_.push_back(file);
}

void AccessTrace::NextEpoch() {
  std::lock_guard lock(mu_);
  last_.swap(current_);
  current_.clear();  // keeps the last epoch but one's capacity: no regrowth next epoch
}

std::vector<uint32_t> AccessTrace::Last() const {
  std::lock_guard lock(mu_);
  return last_;
}

std::vector<uint32_t> AccessTrace::Current() const {
  std::lock_guard lock(mu_);
  return current_;
}

size_t AccessTrace::memory_bytes() const {
  std::lock_guard lock(mu_);
  return sizeof(*this) + (current_.capacity() + last_.capacity()) * sizeof(uint32_t);
}

uint64_t AccessTrace::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

std::optional<double> WhatIfPoint::HitRatio() const {
  if (bytes_served == 0) return std::nullopt;
  const uint64_t misses = std::min(miss_bytes, bytes_served);  // scaled apart: may round past
  return 1.0 - static_cast<double>(misses) / static_cast<double>(bytes_served);
}

// Mattson's stack distances in bytes: the Fenwick tree holds each group's bytes at the time
// of its latest access, so the bytes of distinct groups touched since a group's previous
// access (itself included) are one range sum. LRU holds the longest prefix of the recency
// stack that fits its budget (it evicts only from the stack's bottom), so an access hits a
// budget exactly when that distance fits, for equal and varied group sizes alike.
std::vector<MissRatioPoint> LruMissRatioCurve(const WhatIfShape& shape,
                                              const std::vector<uint32_t>& accesses, double rate) {
  std::vector<uint32_t> last_access(shape.group_bytes.size(), kNone);
  Fenwick bytes_at(accesses.size());
  std::vector<uint64_t> distances;
  distances.reserve(accesses.size());
  for (size_t t = 0; t < accesses.size(); ++t) {
    const uint32_t g = shape.file_group[accesses[t]];
    const auto bytes = static_cast<int64_t>(shape.group_bytes[g]);
    if (last_access[g] != kNone) {
      const size_t prev = last_access[g];
      const int64_t before = prev > 0 ? bytes_at.Prefix(prev - 1) : 0;
      distances.push_back(static_cast<uint64_t>(bytes_at.Prefix(t) - before));
      bytes_at.Add(prev, -bytes);
    }
    bytes_at.Add(t, bytes);
    last_access[g] = static_cast<uint32_t>(t);
  }
  std::sort(distances.begin(), distances.end());
  std::vector<MissRatioPoint> curve;
  const double reads = static_cast<double>(accesses.size());
  for (size_t i = 0; i < distances.size(); ++i) {
    if (i + 1 < distances.size() && distances[i + 1] == distances[i]) continue;
    curve.push_back({BudgetFor(distances[i], rate), static_cast<double>(i + 1) / reads});
  }
  return curve;
}

namespace {

// Counts of the sample, scaled back to the dataset.
WhatIfPoint Unscaled(const WhatIfPoint& sampled, double rate) {
  WhatIfPoint p = sampled;
  p.reads = Unscaled(sampled.reads, rate);
  p.memory_hits = Unscaled(sampled.memory_hits, rate);
  p.tier_reads = Unscaled(sampled.tier_reads, rate);
  p.source_reads = Unscaled(sampled.source_reads, rate);
  p.bytes_served = Unscaled(sampled.bytes_served, rate);
  p.bytes_from_tier = Unscaled(sampled.bytes_from_tier, rate);
  p.bytes_from_source = Unscaled(sampled.bytes_from_source, rate);
  p.member_bytes_from_source = Unscaled(sampled.member_bytes_from_source, rate);
  p.miss_bytes = Unscaled(sampled.miss_bytes, rate);
  return p;
}

WhatIfPoint ReplayOne(const Sample& s, double rate, const WhatIfQuery& query) {
  WhatIfPoint sampled;
  sampled.policy = query.policy;
  sampled.cache_bytes = query.cache_bytes;
  sampled.tier_bytes = query.tier_bytes;
  std::unique_ptr<EvictionPolicy> policy = MakePolicy(query.policy, s.members, s.file_count);
  if (!policy) return sampled;
  Replayer replayer(s, std::move(policy), Scaled(query.cache_bytes, rate),
                    Scaled(query.tier_bytes, rate));
  WhatIfPoint discarded;
  replayer.Run(s.warmup, &discarded);
  replayer.Run(s.measured, &sampled);
  return Unscaled(sampled, rate);
}

}  // namespace

std::vector<WhatIfPoint> ReplaySweep(const WhatIfShape& shape, const std::vector<uint32_t>& warmup,
                                     const std::vector<uint32_t>& measured, double rate,
                                     const std::vector<WhatIfQuery>& queries) {
  const Sample s = Densify(shape, warmup, measured);
  std::vector<WhatIfPoint> points;
  points.reserve(queries.size());
  for (const WhatIfQuery& query : queries) points.push_back(ReplayOne(s, rate, query));
  return points;
}

WhatIfPoint Replay(const WhatIfShape& shape, const std::vector<uint32_t>& warmup,
                   const std::vector<uint32_t>& measured, double rate, const std::string& policy,
                   uint64_t cache_bytes, uint64_t tier_bytes) {
  return ReplaySweep(shape, warmup, measured, rate, {{policy, cache_bytes, tier_bytes}}).front();
}

}  // namespace gpufs
