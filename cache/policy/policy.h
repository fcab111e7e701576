// Which cached group to give up when a new one needs room. A policy sees every admission,
// every member served and every eviction, one at a time (the cache wraps it in a
// LockedPolicy), and answers two questions: is this group worth loading whole (Wanted),
// and which group should go to make room (Victim).
//
//   consume-once (default)  Random-order training reads each image once per epoch; once
//       served, the kernel's page cache holds it, so the daemon's copy is dead weight
//       until the next epoch. A group whose members have all been served this epoch is
//       the first to leave when room is needed, and the only kind that may: a group
//       with members still to serve is never evicted for another. (It leaves lazily, not
//       at once: when the budget holds the whole dataset, keeping consumed groups serves
//       the next epoch from memory, measured 10x faster on the slow-disk benchmark than
//       dropping them.) A group is loaded whole only while at least 90% of its members
//       are still to be served this epoch; otherwise reading the group would cost more
//       than the members it can still serve, and the member alone is read. Epochs are
//       detected from the access stream: a member served again once at least half the
//       dataset has been served this epoch starts a new one.
//   pin  Fill the budget and keep it (MinIO-style): a dataset larger than memory gets a
//       steady hit ratio equal to the cached fraction instead of LRU's thrashing.
//   lru  Least recently used goes first; the baseline.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpufs {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  virtual std::string_view name() const = 0;
  virtual void Admitted(uint32_t group) = 0;
  // Member `file` (an index into the file table) of `group` was read to its end.
  virtual void Served(uint32_t group, uint32_t file) = 0;
  virtual void Evicted(uint32_t group) = 0;
  // Whether an uncached group is worth loading whole now.
  virtual bool Wanted(uint32_t /*group*/) const { return true; }
  // The cached group to evict next, skipping those `busy` says are in use; none to keep all.
  virtual std::optional<uint32_t> Victim(const std::vector<bool>& busy) const = 0;
  // The epoch detected from the access stream and the files served in it; 0 where the
  // policy does not follow epochs.
  virtual uint32_t epoch() const { return 0; }
  virtual uint64_t served_this_epoch() const { return 0; }
};

// Members per group, indexed by group id; what consume-once counts against.
using GroupSizes = std::vector<uint32_t>;

// The policies' names, spelled here once for --policy, the stats and the advice.
namespace policy_name {
inline constexpr std::string_view kConsumeOnce = "consume-once";
inline constexpr std::string_view kPin = "pin";
inline constexpr std::string_view kLru = "lru";
inline constexpr std::string_view kAll[] = {kConsumeOnce, kPin, kLru};
}  // namespace policy_name

// A policy by its name (policy_name); null for an unknown name.
std::unique_ptr<EvictionPolicy> MakePolicy(std::string_view name, GroupSizes sizes,
                                           size_t file_count);

// Another policy behind its own small lock, so that a read served without the cache's
// lock still reports what it served (the cache takes its own lock first, then this one).
class LockedPolicy : public EvictionPolicy {
 public:
  explicit LockedPolicy(std::unique_ptr<EvictionPolicy> inner) : inner_(std::move(inner)) {}
  std::string_view name() const override { return inner_->name(); }
  void Admitted(uint32_t group) override;
  void Served(uint32_t group, uint32_t file) override;
  void Evicted(uint32_t group) override;
  bool Wanted(uint32_t group) const override;
  std::optional<uint32_t> Victim(const std::vector<bool>& busy) const override;
  uint32_t epoch() const override;
  uint64_t served_this_epoch() const override;

 private:
  mutable std::mutex mu_;
  const std::unique_ptr<EvictionPolicy> inner_;  // guarded by mu_
};

class LruPolicy : public EvictionPolicy {
 public:
  std::string_view name() const override { return policy_name::kLru; }
  void Admitted(uint32_t group) override;
  void Served(uint32_t group, uint32_t file) override;
  void Evicted(uint32_t group) override;
  std::optional<uint32_t> Victim(const std::vector<bool>& busy) const override;

 private:
  std::list<uint32_t> order_;  // most recent first
  std::unordered_map<uint32_t, std::list<uint32_t>::iterator> where_;
};

class PinPolicy : public EvictionPolicy {
 public:
  std::string_view name() const override { return policy_name::kPin; }
  void Admitted(uint32_t) override {}
  void Served(uint32_t, uint32_t) override {}
  void Evicted(uint32_t) override {}
  std::optional<uint32_t> Victim(const std::vector<bool>&) const override { return std::nullopt; }
};

class ConsumeOncePolicy : public EvictionPolicy {
 public:
  ConsumeOncePolicy(GroupSizes sizes, size_t file_count);
  std::string_view name() const override { return policy_name::kConsumeOnce; }
  void Admitted(uint32_t group) override;
  void Served(uint32_t group, uint32_t file) override;
  void Evicted(uint32_t group) override;
  bool Wanted(uint32_t group) const override;
  std::optional<uint32_t> Victim(const std::vector<bool>& busy) const override;
  uint32_t epoch() const override { return epoch_; }
  uint64_t served_this_epoch() const override { return served_this_epoch_; }

 private:
  uint32_t Remaining(uint32_t group) const;

  GroupSizes sizes_;
  uint32_t epoch_ = 1;
  size_t served_this_epoch_ = 0;
  std::vector<uint32_t> file_epoch_;   // epoch in which each file was last served
  std::vector<uint32_t> group_epoch_;  // epoch that remaining_ of each group counts
  std::vector<uint32_t> remaining_;
  std::set<std::pair<uint32_t, uint32_t>> cached_;  // (remaining, group), fewest first
};

}  // namespace gpufs
