// What the group cache asks of the tiers below its pinned memory, through one interface:
// a member or a whole group read back from a lower tier, a loaded group kept there, and
// whether a group is being fetched into it. The disk tier's side (cache_tier.h) is the one
// gpufs has; a mount without a lower tier gives the cache none.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cache/account/stall_account.h"
#include "cache/cached_bytes.h"
#include "dataset/catalog.h"

namespace gpufs {

class LowerTier {
 public:
  virtual ~LowerTier() = default;

  // The member from the tier, checked; nullopt when the tier has no good copy of it (the
  // caller reads it from the source). `from` says which tier served it.
  virtual std::optional<Result<CachedBytes>> ReadMember(NodeId file, uint64_t offset, size_t size,
                                                        ServedFrom* from) = 0;
  // The whole copy of `group` (`length` bytes of its span) into `target`, checked
  // (`group_bytes`: where the group's own bytes start in `target`). False when there is no
  // good copy.
  virtual bool ReadGroup(uint32_t group, char* target, size_t length, const char* group_bytes) = 0;
  // Takes `length` loaded bytes of `group`'s span to keep, in the background: the caller
  // keeps them where they are until `written` runs (on a writer thread, once). False when
  // not taken (never kept, already being kept, or too many waiting): `written` never runs.
  virtual bool WriteBack(uint32_t group, const char* bytes, size_t length,
                         std::function<void()> written) = 0;
  // Takes no more write-backs and returns once those taken are written (their `written`
  // ran). The caller holds none of the locks a `written` takes.
  virtual void StopWrites() = 0;
  // Whether `group` is being fetched into the tier: its readers are served from there, and
  // it is not loaded into the pinned tier meanwhile (never fetched twice).
  virtual bool Staging(uint32_t group) const = 0;
  // Which groups the tier holds now.
  virtual std::vector<bool> Groups() const = 0;
  virtual nlohmann::json Stats() const = 0;
  virtual uint64_t read_bytes() const = 0;  // bytes it served
  virtual uint64_t Room() const = 0;        // bytes it may hold
  virtual uint64_t OnDisk() const = 0;      // room of its device left to it
};

}  // namespace gpufs
