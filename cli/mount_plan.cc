#include "cli/mount_plan.h"

#include <sys/statvfs.h>

#include <algorithm>

#include "dataset/open/open_archive.h"
#include "dataset/open/open_dataset.h"
#include "source/network_fs.h"

namespace gpufs {
namespace {

// The option table's row of `name`: what its choices are checked against.
const MountOption* OptionNamed(std::string_view name) {
  for (const MountOption& option : MountOptionTable()) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

// "a, b or c", as a person lists choices.
std::string OneOf(std::span<const std::string_view> choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) out += i + 1 == choices.size() ? " or " : ", ";
    out += choices[i];
  }
  return out;
}

// The peers' URLs, block and secret, from the options and the files they name.
Result<remote::PeerConfig> PlanPeers(const MountArgs& args) {
  remote::PeerConfig peers;
  if (args.peers.empty() && args.peers_file.empty()) {
    if (!args.peer_secret_file.empty()) {
      return Fail(EINVAL, "cannot use --peer-secret-file {}: there are no --peers to send it to",
                  args.peer_secret_file);
    }
    return peers;
  }
  auto urls = args.peers_file.empty() ? remote::ParsePeerList(args.peers)
                                      : remote::ReadPeerFile(args.peers_file);
  if (!urls) return urls.error();
  peers.urls = std::move(*urls);
  peers.block = args.peer_block;
  if (!args.peer_secret_file.empty()) {
    auto secret = remote::ReadPeerSecret(args.peer_secret_file);
    if (!secret) return secret.error();
    peers.secret = std::move(*secret);
  }
  return peers;
}

// The size of the file system `path` is on, or would be on: that of its nearest existing
// parent when it does not exist yet.
uint64_t FileSystemBytes(const std::filesystem::path& path) {
  std::filesystem::path existing = path;
  struct statvfs vfs {};
  while (statvfs(existing.c_str(), &vfs) != 0 && existing.has_relative_path()) {
    existing = existing.parent_path();
  }
  return uint64_t{vfs.f_blocks} * vfs.f_frsize;
}

}  // namespace

std::string StoreUrl(std::string_view source) {
  const std::optional<remote::UrlShape> shape = remote::ShapeOfUrl(source);
  const bool folder =
      shape && !shape->leaf.empty() && !HasArchiveSuffix(shape->leaf) && !shape->query;
  return std::string(source) + (folder ? "/" : "");
}

Result<StorePlan> PlanStore(const MountArgs& args) {
  StorePlan plan;
  plan.url = StoreUrl(args.source);
  plan.location = args.location;
  plan.retry_budget = args.retry_budget;
  plan.transfer_threads = args.transfer_threads;
  plan.request_payer = !args.request_payer.empty();
  plan.verify_tls = !args.no_verify_tls;
  plan.deadlines = args.deadlines;
  auto peers = PlanPeers(args);
  if (!peers) return peers.error();
  plan.peers = std::move(*peers);
  return plan;
}

void ApplyStorePlan(const StorePlan& plan, remote::StoreConfig& config) {
  config.retry_budget = plan.retry_budget;
  if (plan.transfer_threads > 0) config.transfer_threads = plan.transfer_threads;
  config.request_payer = plan.request_payer;
  config.verify_tls = plan.verify_tls;
  config.deadlines = plan.deadlines;
  config.peers = plan.peers;
}

std::filesystem::path TierRoot(const MountArgs& args) {
  return args.disk_cache.empty() ? DefaultCacheDir() / "tier"
                                 : std::filesystem::absolute(args.disk_cache);
}

TierFacts ObserveTier(const MountArgs& args, bool remote,
                      const std::filesystem::path& dataset_dir) {
  TierFacts facts;
  if (!remote) {
    const auto type = FilesystemTypeOf(dataset_dir);
    if (type && SlowerThanLocalDisk(*type)) {
      facts.slow_source = std::string(NetworkFilesystemName(*type).value_or("a network fs"));
    }
  }
  const std::filesystem::path root = TierRoot(args);
  const auto type = FilesystemTypeOf(root);
  if (const auto network = type ? NetworkFilesystemName(*type) : std::nullopt) {
    facts.root_network = std::string(*network);
  }
  facts.root_fs_bytes = FileSystemBytes(root);
  return facts;
}

Status CheckTierOptions(const MountArgs& args) {
  const bool asked = !args.disk_cache.empty() || args.disk_cache_bytes > 0;
  if (asked && !args.no_disk_cache && args.cache_bytes == 0) {
    return Fail(EINVAL,
                "cannot use a disk cache with --cache-size 0: it lies under the pinned one");
  }
  return Ok{};
}

// A tier is on where asked for, and by default for a store's dataset or one on a network
// filesystem; never beside --cache-size 0 (it lies under the pinned cache), and never by
// default in a folder on a network filesystem (slow, and it fills a quota).
Result<TierPlan> PlanTier(const MountArgs& args, bool remote, std::string_view label,
                          const TierFacts& facts) {
  TierPlan plan;
  plan.asked = !args.disk_cache.empty() || args.disk_cache_bytes > 0;
  if (args.no_disk_cache || (!plan.asked && !remote && !facts.slow_source)) return plan;
  if (Status s = CheckTierOptions(args); !s) return s.error();
  if (args.cache_bytes == 0) return plan;
  DiskTierOptions options;
  options.root = TierRoot(args);
  if (args.disk_cache.empty() && facts.root_network) {
    plan.why_none = fmt::format(
        "no disk cache: the default folder {} is on {}, a network filesystem, where a cache "
        "is slow and fills a quota; give --disk-cache DIR on a local disk to keep one",
        options.root.string(), *facts.root_network);
    return plan;
  }
  options.dataset = TierDatasetFolder(label);
  options.max_bytes = args.disk_cache_bytes;
  options.evict = args.policy != policy_name::kPin;
  // A bound nobody gave is a quarter of the tier's file system, so that a cache nobody
  // sized never fills the disk it shares; not the dataset's size: the folder is shared by
  // every dataset and daemon that use it, and such a bound would evict the others' copies.
  plan.sized_by_default = options.max_bytes == 0;
  if (plan.sized_by_default) options.max_bytes = facts.root_fs_bytes / 4;
  if (!plan.asked && facts.slow_source) plan.slow_source = *facts.slow_source;
  plan.options = std::move(options);
  return plan;
}

Status CheckPolicy(const MountArgs& args) {
  if (args.cache_bytes == 0) return Ok{};
  const MountOption* option = OptionNamed("policy");
  const auto& names = option->choices;
  if (std::find(names.begin(), names.end(), args.policy) != names.end()) return Ok{};
  return Fail(EINVAL, "unknown --policy {}: use {}", args.policy, OneOf(names));
}

EngineChoice PlanEngine(const MountArgs& args, bool remote) {
  if (remote) return EngineChoice::kStore;
  const bool uring = args.io_engine == engine_name::kUring && args.cache_bytes > 0;
  return uring ? EngineChoice::kUring : EngineChoice::kPread;
}

CacheOptions PlanCacheOptions(const MountArgs& args, const CacheInputs& inputs) {
  CacheOptions options;
  options.policy = args.policy;
  options.prefetch_depth = args.prefetch && inputs.whole_groups ? args.prefetch_depth : 0;
  options.io_piece = inputs.part;
  options.demand_block = inputs.demand_block;
  options.reads_in_flight = args.reads_in_flight ? args.reads_in_flight : inputs.parts_in_flight;
  options.verify = args.verify;
  options.digests = inputs.digests;
  options.miss_reads = args.miss_reads;
  options.page_cache_bytes = inputs.page_cache_bytes;
  options.whole_groups = inputs.whole_groups;
  options.adapt_window = inputs.adapt_window;
  return options;
}

bool WholeGroupsPay(const MountArgs& args, uint64_t room, uint64_t dataset_bytes) {
  return args.world_size <= 1 || room >= dataset_bytes;
}

Result<MountPlan> PlanMount(const MountArgs& args) {
  MountPlan plan;
  const bool remote = remote::IsRemoteUrl(args.source);
  if (!remote && (!args.peers.empty() || !args.peers_file.empty())) {
    return Fail(EINVAL,
                "cannot use peers for {}: peers cache s3:// and http(s):// sources, and this is "
                "a local one",
                args.source);
  }
  if (Status s = CheckPolicy(args); !s) return s.error();
  if (Status s = CheckTierOptions(args); !s) return s.error();
  if (remote) {
    auto store = PlanStore(args);
    if (!store) return store.error();
    plan.store = std::move(*store);
  }
  plan.engine = PlanEngine(args, remote);
  return plan;
}

}  // namespace gpufs
