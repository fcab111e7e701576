#include "cache/policy/policy.h"

namespace gpufs {

std::unique_ptr<EvictionPolicy> MakePolicy(std::string_view name, GroupSizes sizes,
                                           size_t file_count) {
  if (name == policy_name::kConsumeOnce) {
    return std::make_unique<ConsumeOncePolicy>(std::move(sizes), file_count);
  }
  if (name == policy_name::kPin) return std::make_unique<PinPolicy>();
  if (name == policy_name::kLru) return std::make_unique<LruPolicy>();
  return nullptr;
}

void LockedPolicy::Admitted(uint32_t group) {
  std::lock_guard lock(mu_);
  inner_->Admitted(group);
}

void LockedPolicy::Served(uint32_t group, uint32_t file) {
  std::lock_guard lock(mu_);
  inner_->Served(group, file);
}

void LockedPolicy::Evicted(uint32_t group) {
  std::lock_guard lock(mu_);
  inner_->Evicted(group);
}

bool LockedPolicy::Wanted(uint32_t group) const {
  std::lock_guard lock(mu_);
  return inner_->Wanted(group);
}

std::optional<uint32_t> LockedPolicy::Victim(const std::vector<bool>& busy) const {
  std::lock_guard lock(mu_);
  return inner_->Victim(busy);
}

uint32_t LockedPolicy::epoch() const {
  std::lock_guard lock(mu_);
  return inner_->epoch();
}

uint64_t LockedPolicy::served_this_epoch() const {
  std::lock_guard lock(mu_);
  return inner_->served_this_epoch();
}

void LruPolicy::Admitted(uint32_t group) {
  order_.push_front(group);
  where_[group] = order_.begin();
}

void LruPolicy::Served(uint32_t group, uint32_t) {
  auto it = where_.find(group);
  if (it != where_.end()) order_.splice(order_.begin(), order_, it->second);
}

void LruPolicy::Evicted(uint32_t group) {
  auto it = where_.find(group);
  if (it == where_.end()) return;
  order_.erase(it->second);
  where_.erase(it);
}

std::optional<uint32_t> LruPolicy::Victim(const std::vector<bool>& busy) const {
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    if (!busy[*it]) return *it;
  }
  return std::nullopt;
}

ConsumeOncePolicy::ConsumeOncePolicy(GroupSizes sizes, size_t file_count)
    : sizes_(std::move(sizes)),
      file_epoch_(file_count, 0),
      group_epoch_(sizes_.size(), 0),
      remaining_(sizes_.size(), 0) {}

uint32_t ConsumeOncePolicy::Remaining(uint32_t group) const {
  return group_epoch_[group] == epoch_ ? remaining_[group] : sizes_[group];
}

void ConsumeOncePolicy::Admitted(uint32_t group) { cached_.emplace(Remaining(group), group); }

bool ConsumeOncePolicy::Wanted(uint32_t group) const {
  return Remaining(group) > 0 && 10 * uint64_t{Remaining(group)} >= 9 * uint64_t{sizes_[group]};
}

void ConsumeOncePolicy::Served(uint32_t group, uint32_t file) {
  if (file_epoch_[file] == epoch_) {
    // Served twice: the kernel dropped it and the trainer came back. Once half the
    // dataset went by, that is the next epoch beginning.
    if (2 * served_this_epoch_ < file_epoch_.size()) return;
    ++epoch_;
    served_this_epoch_ = 0;
    std::set<std::pair<uint32_t, uint32_t>> refreshed;
    for (const auto& [left, g] : cached_) refreshed.emplace(sizes_[g], g);
    cached_ = std::move(refreshed);
  }
  file_epoch_[file] = epoch_;
  ++served_this_epoch_;
  const uint32_t before = Remaining(group);
  group_epoch_[group] = epoch_;
  remaining_[group] = before > 0 ? before - 1 : 0;
  if (cached_.erase({before, group}) > 0) cached_.emplace(remaining_[group], group);
}

void ConsumeOncePolicy::Evicted(uint32_t group) { cached_.erase({Remaining(group), group}); }

// Only a group with nothing left to serve may make room; such groups are normally
// dropped already when their last member is served.
std::optional<uint32_t> ConsumeOncePolicy::Victim(const std::vector<bool>& busy) const {
  for (const auto& [left, group] : cached_) {
    if (left > 0) break;
    if (!busy[group]) return group;
  }
  return std::nullopt;
}

}  // namespace gpufs
