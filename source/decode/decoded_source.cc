#include "source/decode/decoded_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "base/huge_pages.h"
#include "dataset/compressed/decode_group.h"

namespace gpufs {

// A read cut in pieces: answered once every piece is, with the first error or its length.
struct DecodedSource::Answer {
  std::function<void(Result<size_t>)> done;
  size_t length = 0;  // what the read reports: less than asked only where the blob ends
  std::mutex mu;
  int left = 1;  // pieces not yet answered, and the cutting itself
  std::optional<Error> error;

  void Add() {
    std::lock_guard lock(mu);
    ++left;
  }
  // True for the last piece, whose caller then replies.
  bool Settle(const Error* e) {
    std::lock_guard lock(mu);
    if (e && !error) error = *e;
    return --left == 0;
  }
  void Reply() {
    if (error) {
      done(*error);
    } else {
      done(length);
    }
  }
};

struct DecodedSource::Group {
  uint32_t blob = 0;
  const DecodeRecipe* recipe = nullptr;
  bool ready = false;
  std::optional<Error> error;
  std::unique_ptr<char[]> bytes;  // recipe->size decoded bytes, once ready
  std::vector<Ready> waiters;     // guarded by the source's mu_
  uint64_t used = 0;              // the source's clock at the last use
  // The ranges copied out of it so far (start -> end, merged), and their bytes; guarded by
  // the source's mu_.
  mutable std::map<uint64_t, uint64_t> copied;
  mutable uint64_t served = 0;
  // The stored bytes while they are read: the recipe's range, aligned out, on huge pages so
  // that direct reads into it go to the device in requests as large as a tar's
  // (base/huge_pages.h).
  HugePageBuffer stored;
  size_t stored_skip = 0;
  size_t stored_length = 0;
  std::mutex mu;  // guards what the stored read's parts report
  size_t parts_left = 0;
  size_t short_at = SIZE_MAX;  // where the first part that came back short ended
  std::optional<Error> read_error;
};

namespace {

// The largest decoded group, in whole 64 KiB, where no bytes pass as stored; else 0.
size_t WholeGroupBytes(const std::vector<DecodePlan>& plans) {
  uint64_t largest = 0;
  for (const DecodePlan& plan : plans) {
    for (const DecodeRecipe& r : plan.recipes) {
      if (r.kind == DecodeKind::kAsStored) return 0;
      largest = std::max(largest, r.size);
    }
  }
  return static_cast<size_t>((largest + 65535) / 65536 * 65536);
}

}  // namespace

DecodedSource::DecodedSource(BlobSource& stored, std::vector<DecodePlan> plans,
                             std::function<std::string(uint32_t, uint64_t)> name_of,
                             DecodedOptions options)
    : stored_(stored),
      plans_(std::move(plans)),
      plan_of_(stored.blob_count(), -1),
      decoded_(stored.blob_count()),
      name_of_(std::move(name_of)),
      options_(options) {
  bool all_gzip = true;
  for (size_t i = 0; i < plans_.size(); ++i) {
    all_gzip = all_gzip && plans_[i].kind == DecodeKind::kGzip;
    const uint32_t blob = plans_[i].blob;
    if (blob >= plan_of_.size()) continue;
    plan_of_[blob] = static_cast<int>(i);
    const BlobInfo* seen = stored_.Expected(blob);
    decoded_[blob] = BlobInfo{plans_[i].decoded_size, 0, seen ? seen->mtime_ns : 0};
  }
  // A zip's decoded groups start on pages of their own (open_archive.cc), so aligned reads
  // of them stay inside them.
  alignment_ = all_gzip && plans_.size() == plan_of_.size() ? 1 : stored_.Alignment();
  whole_ = WholeGroupBytes(plans_);
  const unsigned threads =
      options_.threads ? options_.threads : std::max(1u, std::thread::hardware_concurrency());
  threads_count_ = threads;
  for (unsigned t = 0; t < threads; ++t) threads_.emplace_back([this] { Work(); });
}

DecodedSource::~DecodedSource() {
  {
    std::unique_lock lock(mu_);
    // Stored reads still on their way answer into this object: wait for them, and for the
    // decodes they queue.
    work_ready_.wait(lock, [this] { return in_flight_ == 0; });
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (std::thread& t : threads_) t.join();
}

const DecodePlan* DecodedSource::PlanOf(uint32_t blob) const {
  return blob < plan_of_.size() && plan_of_[blob] >= 0 ? &plans_[plan_of_[blob]] : nullptr;
}

bool DecodedSource::AsStored(uint32_t blob, uint64_t offset, uint64_t length) const {
  const DecodePlan* plan = PlanOf(blob);
  return !plan || (plan->kind == DecodeKind::kZip && offset + length <= plan->stored_size);
}

const BlobInfo* DecodedSource::Expected(uint32_t blob) const {
  return PlanOf(blob) ? &decoded_[blob] : stored_.Expected(blob);
}

std::string DecodedSource::Identity(uint32_t blob) const {
  std::string identity = stored_.Identity(blob);
  // A copy of decoded bytes is of the archive's bytes and of how they were decoded.
  if (PlanOf(blob) && !identity.empty()) identity += " decoded=1";
  return identity;
}

void DecodedSource::Submit(ReadKind kind, std::vector<BlobRead> reads) {
  std::vector<BlobRead> passed;
  for (BlobRead& read : reads) {
    const DecodePlan* plan = PlanOf(read.blob);
    if (plan) {
      Cut(kind, std::move(read), *plan, passed);
    } else {
      passed.push_back(std::move(read));
    }
  }
  if (!passed.empty()) stored_.Submit(kind, std::move(passed));
}

void DecodedSource::Cut(ReadKind kind, BlobRead read, const DecodePlan& plan,
                        std::vector<BlobRead>& passed) {
  auto answer = std::make_shared<Answer>();
  answer->done = std::move(read.done);
  const uint64_t end = std::min<uint64_t>(read.offset + read.length, plan.decoded_size);
  answer->length = end > read.offset ? static_cast<size_t>(end - read.offset) : 0;
  for (uint64_t pos = read.offset; pos < end;) {
    char* to = read.buffer + (pos - read.offset);
    if (plan.kind == DecodeKind::kZip && pos < plan.stored_size) {
      pos += PassStored(read, pos, end, plan, answer, passed);
      continue;
    }
    const DecodeRecipe* recipe = plan.Find(pos);
    if (!recipe) {
      // Between groups: bytes of no member.
      auto next = std::upper_bound(plan.recipes.begin(), plan.recipes.end(), pos,
                                   [](uint64_t o, const DecodeRecipe& r) { return o < r.offset; });
      const uint64_t stop = next == plan.recipes.end() ? end : std::min(end, next->offset);
      std::memset(to, 0, static_cast<size_t>(stop - pos));
      pos = stop;
      continue;
    }
    const uint64_t stop = std::min(end, recipe->offset + recipe->size);
    const size_t n = static_cast<size_t>(stop - pos);
    const uint64_t within = pos - recipe->offset;
    answer->Add();
    // Only the group cache's reads count towards a group's end: a member read for a reader
    // waiting while the group loads reads those bytes again.
    const bool counted = kind == ReadKind::kGroup;
    WithGroup(read.blob, *recipe, read.urgent,
              [this, answer, to, n, within, counted](const Group& g) {
                if (!g.error) std::memcpy(to, g.bytes.get() + within, n);
                if (!g.error && counted) Served(g, within, n);
                if (answer->Settle(g.error ? &*g.error : nullptr)) answer->Reply();
              });
    pos = stop;
  }
  // The cutting's own count: when every piece was answered already, the reply goes from a
  // decoding thread, never from inside Submit, whose caller may hold its own lock.
  if (answer->Settle(nullptr)) {
    Post([answer] { answer->Reply(); });
  }
}

// Bytes as stored, from `pos`: the stored source reads them straight into the caller's
// buffer. A read the cache aligned runs on past the archive's end to the next page, where
// the decoded groups begin: the stored source gets that aligned length (direct I/O takes
// no other), ends short at the archive's end, and the rest reads as zeros. Returns the
// bytes of the read this piece covers.
size_t DecodedSource::PassStored(const BlobRead& read, uint64_t pos, uint64_t end,
                                 const DecodePlan& plan, const std::shared_ptr<Answer>& answer,
                                 std::vector<BlobRead>& passed) {
  const uint64_t align = std::max<uint64_t>(stored_.Alignment(), 1);
  const uint64_t page_end = (plan.stored_size + align - 1) / align * align;
  const size_t n = static_cast<size_t>(std::min(end, page_end) - pos);
  const size_t need = static_cast<size_t>(std::min(end, plan.stored_size) - pos);
  char* to = read.buffer + (pos - read.offset);
  answer->Add();
  passed.push_back(BlobRead{read.blob, pos, n, to,
                            [this, answer, to, n, need, blob = read.blob](Result<size_t> got) {
                              std::optional<Error> e;
                              if (!got) {
                                e = got.error();
                              } else if (*got < need) {
                                e = Fail(EIO, "{} ends before its index says: changed since",
                                         stored_.Describe(blob));
                              } else {
                                std::memset(to + *got, 0, n - *got);
                              }
                              if (answer->Settle(e ? &*e : nullptr)) answer->Reply();
                            },
                            read.urgent});
  return n;
}

void DecodedSource::WithGroup(uint32_t blob, const DecodeRecipe& recipe, bool urgent, Ready ready) {
  std::shared_ptr<Group> group;
  {
    std::lock_guard lock(mu_);
    auto& slot = groups_[{blob, recipe.offset}];
    if (slot) {
      slot->used = ++clock_;
      if (!slot->ready) {
        slot->waiters.push_back(std::move(ready));
        return;
      }
      ++counters_.reuses;
      group = slot;
    } else {
      slot = std::make_shared<Group>();
      slot->blob = blob;
      slot->recipe = &recipe;
      slot->used = ++clock_;
      slot->waiters.push_back(std::move(ready));
      ++in_flight_;
    }
    if (!group) group = slot;
  }
  if (group->ready) {
    ready(*group);
    return;
  }
  ReadStored(blob, recipe, std::move(group), urgent);
}

void DecodedSource::ReadStored(uint32_t blob, const DecodeRecipe& recipe,
                               std::shared_ptr<Group> group, bool urgent) {
  const uint64_t align = std::max<size_t>(stored_.Alignment(), 64);
  const uint64_t begin = recipe.stored_offset / align * align;
  const uint64_t end = (recipe.stored_offset + recipe.stored_size + align - 1) / align * align;
  const size_t length = static_cast<size_t>(end - begin);
  group->stored = HugePageBuffer(length);
  if (!group->stored.data()) {
    group->read_error = Fail(ENOMEM, "cannot read {}: no memory for {} bytes of a group",
                             stored_.Describe(blob), length);
    Post([this, group, blob, &recipe] { Decode(blob, recipe, group); });
    return;
  }
  group->stored_skip = static_cast<size_t>(recipe.stored_offset - begin);
  group->stored_length = length;
  const size_t part = stored_.PartSize() ? std::max(stored_.PartSize(), size_t{align}) : length;
  std::vector<BlobRead> reads;
  for (size_t at = 0; at < length; at += part) {
    const size_t n = std::min(part, length - at);
    reads.push_back(BlobRead{blob, begin + at, n, group->stored.data() + at,
                             [this, group, blob, &recipe, at, n](Result<size_t> got) {
                               bool last = false;
                               {
                                 std::lock_guard lock(group->mu);
                                 if (!got && !group->read_error) group->read_error = got.error();
                                 // Only what lies before the first short part counts.
                                 if (got && *got < n) {
                                   group->short_at = std::min(group->short_at, at + *got);
                                 }
                                 last = --group->parts_left == 0;
                               }
                               if (!last) return;
                               Post([this, group, blob, &recipe] { Decode(blob, recipe, group); });
                             },
                             urgent});
  }
  group->parts_left = reads.size();
  stored_.Submit(ReadKind::kGroup, std::move(reads));
}

void DecodedSource::Post(std::function<void()> job) {
  std::lock_guard lock(mu_);
  work_.push_back(std::move(job));
  work_ready_.notify_one();
}

void DecodedSource::Decode(uint32_t blob, const DecodeRecipe& recipe,
                           const std::shared_ptr<Group>& group) {
  const DecodePlan& plan = *PlanOf(blob);
  const auto start = std::chrono::steady_clock::now();
  const size_t have = std::min(group->stored_length, group->short_at);
  if (group->read_error) {
    group->error = group->read_error;
  } else if (group->stored_skip + recipe.stored_size > have) {
    group->error = Fail(EIO,
                        "{} ends at byte {}, before the compressed bytes of a group do: "
                        "changed since it was indexed",
                        stored_.Describe(blob), recipe.stored_offset - group->stored_skip + have);
  } else {
    group->bytes.reset(new char[recipe.size]);
    const auto namer = [this, blob](uint64_t offset) {
      return name_of_ ? name_of_(blob, offset) : std::string();
    };
    Status s =
        DecodeGroup(plan, recipe, {group->stored.data() + group->stored_skip, recipe.stored_size},
                    {group->bytes.get(), recipe.size}, stored_.Describe(blob), namer);
    if (!s) group->error = s.error();
  }
  group->stored = HugePageBuffer();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    std::lock_guard lock(mu_);
    decode_seconds_ += seconds;
    counters_.read_bytes += recipe.stored_size;
    if (group->error) {
      ++counters_.errors;
    } else {
      ++counters_.groups;
      counters_.bytes += recipe.size;
    }
  }
  Finish(group);
}

void DecodedSource::Finish(const std::shared_ptr<Group>& group) {
  std::vector<Ready> waiters;
  {
    std::lock_guard lock(mu_);
    group->ready = true;
    waiters.swap(group->waiters);
    const auto key = std::make_pair(group->blob, group->recipe->offset);
    if (group->error) {
      // Not kept: the next read tries again (the stored read may be what failed).
      auto it = groups_.find(key);
      if (it != groups_.end() && it->second == group) groups_.erase(it);
    } else {
      kept_ += group->recipe->size;
      Evict();
    }
    --in_flight_;
  }
  for (Ready& ready : waiters) ready(*group);
  work_ready_.notify_all();  // the destructor may wait for in_flight_
}

namespace {

// Adds [begin, end) to the merged ranges `ranges` and returns how many of its bytes were
// not in them yet.
uint64_t Cover(std::map<uint64_t, uint64_t>& ranges, uint64_t begin, uint64_t end) {
  uint64_t before = 0;
  auto it = ranges.upper_bound(begin);
  if (it != ranges.begin() && std::prev(it)->second >= begin) --it;
  uint64_t lo = begin, hi = end;
  while (it != ranges.end() && it->first <= end) {
    before += it->second - it->first;
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = ranges.erase(it);
  }
  ranges[lo] = hi;
  return (hi - lo) - before;
}

}  // namespace

// A group whose every byte has been copied out once has done its work: the group cache
// reads each block of a group once, and keeps it. A reader that comes back for it has it
// decoded again.
void DecodedSource::Served(const Group& group, uint64_t within, size_t n) {
  std::lock_guard lock(mu_);
  // Ranges, not a count: the cache aligns its reads, so the first block of the next group
  // copies the end of this one again.
  group.served += Cover(group.copied, within, within + n);
  if (group.served < group.recipe->size) return;
  auto it = groups_.find({group.blob, group.recipe->offset});
  if (it == groups_.end() || it->second.get() != &group) return;
  kept_ -= group.recipe->size;
  groups_.erase(it);  // whoever answers from it holds it
}

// Drops the least recently used decoded groups beyond keep_bytes; caller holds mu_.
void DecodedSource::Evict() {
  while (kept_ > options_.keep_bytes) {
    auto oldest = groups_.end();
    for (auto it = groups_.begin(); it != groups_.end(); ++it) {
      if (it->second->ready && !it->second->error &&
          (oldest == groups_.end() || it->second->used < oldest->second->used)) {
        oldest = it;
      }
    }
    if (oldest == groups_.end()) return;
    kept_ -= oldest->second->recipe->size;
    groups_.erase(oldest);  // readers copying from it still hold it
  }
}

void DecodedSource::Work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      work_ready_.wait(lock, [this] { return stopping_ || !work_.empty(); });
      if (work_.empty()) return;  // stopping, and nothing left to do
      job = std::move(work_.front());
      work_.pop_front();
    }
    job();
  }
}

bool DecodedSource::Readahead(uint32_t blob, uint64_t offset, size_t length, uint64_t first,
                              std::function<void()> landed, std::function<void()> done) {
  if (!AsStored(blob, offset, length)) return false;
  return stored_.Readahead(blob, offset, length, first, std::move(landed), std::move(done));
}

Result<size_t> DecodedSource::ReadCached(uint32_t blob, uint64_t offset, size_t length,
                                         char* buffer) {
  if (!AsStored(blob, offset, length)) {
    return Fail(EAGAIN, "{}: decoded bytes are not in the page cache", Describe(blob));
  }
  return stored_.ReadCached(blob, offset, length, buffer);
}

nlohmann::json DecodedSource::Stats() const {
  nlohmann::json j = stored_.Stats();
  std::lock_guard lock(mu_);
  PutCounts(j, source_stat::kDecodeCounterFigures, counters_);
  j[source_stat::kDecodeSeconds] = decode_seconds_;
  return j;
}

}  // namespace gpufs
