// A mount's plan: what each component is made with, mapped from the parsed options by pure
// functions, one per component (the store, the disk tier, the I/O engine, the group
// cache). The process that was started makes and checks the plan without opening what the
// daemon will open: a name against the option table, options against each other, a folder
// by statfs alone. The daemon then carries it out, so that the tier's folders and ledger
// are opened once, the store's URL resolved once, and each says what it is once.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "cache/cache_options.h"
#include "cache/tier/disk_tier.h"
#include "cli/options/mount_options.h"
#include "source/member_digests.h"
#include "source/remote/address/store_config.h"
#include "source/remote/location.h"

namespace gpufs {

// How an s3:// or http(s):// source is reached: the URL resolved, the resolver's options,
// and the fields of the store's config that the options set (the resolver finds the rest).
struct StorePlan {
  std::string url;  // the source, with its '/' where it names a folder
  remote::LocationOptions location;
  std::chrono::milliseconds retry_budget{};
  unsigned transfer_threads = 0;  // 0: the store's own choice from the cores
  bool request_payer = false;
  bool verify_tls = true;
  remote::TransferDeadlines deadlines;
  remote::PeerConfig peers;  // no URLs: no peers
};

// The URL a source is resolved at, from its text alone: one naming neither an archive (by
// its suffix: kArchiveSuffixes) nor one object by a query (a presigned URL) names a folder,
// and gets its '/'.
std::string StoreUrl(std::string_view source);

// The store's plan; the peers' list and secret are read from their files.
Result<StorePlan> PlanStore(const MountArgs& args);

// Sets every field of `config` the options own, from the plan.
void ApplyStorePlan(const StorePlan& plan, remote::StoreConfig& config);

// What the tier's plan depends on beyond the options, as statfs and statvfs say it of the
// folders (ObserveTier); nothing is opened or created.
struct TierFacts {
  // The network filesystem a local dataset lies on, where it is slower to read than a
  // local disk (NFS, Lustre, ...): a tier pays there by default.
  std::optional<std::string> slow_source;
  // The network filesystem the tier's folder (or its nearest existing parent) is on.
  std::optional<std::string> root_network;
  uint64_t root_fs_bytes = 0;  // the size of that file system
};

// The disk tier a mount gets, and why.
struct TierPlan {
  std::optional<DiskTierOptions> options;  // nullopt: no tier
  // --disk-cache or --disk-cache-size was given: a tier that cannot be opened refuses the
  // mount; a default one that cannot is only a warning.
  bool asked = false;
  // Nobody gave a bound (a quarter of its file system): once opened, the tier says what
  // it holds, with `slow_source` when the dataset's network filesystem is why it is there.
  bool sized_by_default = false;
  std::string slow_source;
  std::string why_none;  // a default tier left off, for the log; empty: nothing to say
};

// The tier's folder: --disk-cache, or tier/ in the user's cache folder.
std::filesystem::path TierRoot(const MountArgs& args);

// The facts for the dataset in `dataset_dir` (`remote`: an s3:// or http(s):// source).
TierFacts ObserveTier(const MountArgs& args, bool remote, const std::filesystem::path& dataset_dir);

// Refuses a tier asked for beside --cache-size 0; checked before the dataset is listed.
Status CheckTierOptions(const MountArgs& args);

// The tier of a dataset called `label` (its URL or path: the tier's folder for it).
Result<TierPlan> PlanTier(const MountArgs& args, bool remote, std::string_view label,
                          const TierFacts& facts);

// --policy's name, one of the option table's choices (policy_name); a mount without a
// cache has no policy.
Status CheckPolicy(const MountArgs& args);

// Who reads a local dataset's blobs; a store's are read by its transfers.
enum class EngineChoice { kStore, kUring, kPread };
// io_uring reads into the pinned arena, which only a mount with a cache has.
EngineChoice PlanEngine(const MountArgs& args, bool remote);

// What the group cache's options take beyond the mount's, known in the daemon once the
// source is made.
struct CacheInputs {
  size_t part = 0;  // the source's PartSize, DemandSize and PartsInFlight
  size_t demand_block = 0;
  unsigned parts_in_flight = 4;
  uint64_t page_cache_bytes = 0;  // PageCacheRoom of the budget
  bool whole_groups = true;       // WholeGroupsPay
  std::shared_ptr<const MemberDigests> digests;
  bool adapt_window = true;  // the source's LatencyTracksQueue
};
CacheOptions PlanCacheOptions(const MountArgs& args, const CacheInputs& inputs);

// With --world-size N a node reads about 1/N of each group an epoch: whole groups pay
// only when it keeps the dataset (`room`: the budget and the tier's room).
bool WholeGroupsPay(const MountArgs& args, uint64_t room, uint64_t dataset_bytes);

// The plan of a mount, made in the process that was started and carried out in the daemon.
// The store's part comes first (the dataset is listed through it), the tier's once the
// dataset is open (its folder is named after the dataset).
struct MountPlan {
  std::optional<StorePlan> store;  // s3:// and http(s):// sources
  EngineChoice engine = EngineChoice::kPread;
  TierPlan tier;
};

// What can be planned and checked before the dataset is opened.
Result<MountPlan> PlanMount(const MountArgs& args);

}  // namespace gpufs
