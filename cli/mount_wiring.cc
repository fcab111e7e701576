#include "cli/mount_wiring.h"

#include <malloc.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "base/sizes.h"
#include "cli/mount_point.h"
#include "cli/options/kernel_limits.h"
#include "cli/options/sizes.h"
#include "cli/progress_bar.h"
#include "cli/stat/stat_source.h"
#include "dataset/catalog.h"
#include "source/decode/decoded_source.h"
#include "source/local_source.h"
#include "source/remote/address/region.h"
#include "source/remote/credentials/credentials.h"
#include "source/remote/remote_dataset.h"
#include "source/remote/remote_source.h"

namespace gpufs {
namespace {

// The one resolution of the store's URL (its credentials fetched), with every field the
// options own set from the plan; what the resolver warns of is told once, here.
Result<remote::Location> LocateRemote(const StorePlan& plan) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (eq != std::string_view::npos) env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  auto location = remote::ResolveLocation(plan.url, plan.location, env);
  if (!location) return location;
  for (const std::string& warning : location->warnings) {
    fmt::print(stderr, "gpufsd: warning: {}\n", warning);
  }
  ApplyStorePlan(plan, location->config);
  if (!plan.verify_tls) {
    spdlog::warn(
        "--no-verify-tls: the certificate of {} is NOT checked; anyone on the path can "
        "read and change what is sent. For test rigs only.",
        location->config.endpoint);
  }
  return location;
}

// A peer writes its own headers, so only digests from the store's index can prove its
// bytes (source/member_digests.h): a dataset without them is not read through peers.
Error RefusePeers(const std::string& source, const std::string& why) {
  return Error{EINVAL, fmt::format("cannot use --peers with {}: {}, so a peer's bytes could not "
                                   "be checked; pack it with `gpufsd pack` (or add SHA-256 "
                                   "digests to a pack or a mytar folder with `gpufsd index`)",
                                   source, why)};
}

// A requester-pays bucket refuses anyone but its owner who does not agree to pay, with a
// plain AccessDenied (AWS and radosgw alike): the refusal names the option that agrees.
Error WithRequesterPaysHint(Error error, const remote::StoreConfig& config) {
  if (error.code == EACCES && config.scheme == remote::Scheme::kS3 && !config.request_payer) {
    error.message += "; if the bucket is requester-pays, mount with --request-payer requester";
  }
  return error;
}

Result<Opened> OpenAnySource(const MountArgs& args, const MountPlan& plan,
                             const OpenOptions& open_options) {
  if (!plan.store) {
    auto dataset = OpenDataset(args.source, open_options);
    if (!dataset) return dataset.error();
    return Opened{std::move(*dataset), std::nullopt, {}, nullptr};
  }
  auto location = LocateRemote(*plan.store);
  if (!location) return location.error();
  const bool peers = !location->config.peers.urls.empty();
  if (peers && !location->leaf.empty()) {  // a tar archive, refused before it is listed
    return RefusePeers(args.source, "its index has no SHA-256 of each file");
  }
  // This store's thread ends here: threads do not survive the fork that detaches the
  // daemon, which opens its own.
  remote::ObjectStore store(location->config);
  auto opened = remote::OpenRemoteDataset(store, location->leaf, open_options);
  if (!opened) return WithRequesterPaysHint(opened.error(), location->config);
  // The serving process's store starts where this one learned the bucket is.
  if (store.Region() != location->config.region) {
    remote::MoveToRegion(location->config, store.Region());
  }
  std::shared_ptr<const MemberDigests> digests;
  if (peers) {
    auto made = MemberDigests::FromCatalog(opened->dataset.catalog);
    if (!made) return RefusePeers(args.source, made.error().message);
    digests = std::move(*made);
  }
  return Opened{std::move(opened->dataset), std::move(*location), std::move(opened->objects),
                std::move(digests)};
}

// What a tier nobody sized holds: its room (the bound, or the disk's free space less what
// the tier leaves free, whichever is less), and how that compares with what this dataset
// takes there (its bytes, and per group a header and checked blocks' sums). Told on the
// terminal, which the daemon keeps until the mount is ready.
void TellDefaultBound(const DiskTier& tier, const TierPlan& plan, const Catalog& catalog) {
  const uint64_t room = tier.Room();
  const uint64_t bound = plan.options->max_bytes;
  const uint64_t dataset =
      catalog.total_bytes() + catalog.total_bytes() / 100 + uint64_t{catalog.group_count()} * 65536;
  std::string why = "a quarter of its file system";
  if (room < bound) {
    why = fmt::format(
        "its disk's free space less the {} it leaves free; {}, {}, once there is room",
        FormatSize(tier.Stats()[tier_stat::kKeepFree].get<uint64_t>()), why, FormatSize(bound));
  }
  fmt::print(stderr,
             "gpufsd: disk cache {} holds up to {} ({}; this dataset takes {}{}); "
             "--disk-cache-size changes it\n",
             plan.options->root.string(), FormatSize(room), why, FormatSize(dataset),
             dataset > room ? ", more" : "");
}

// The planned tier, opened (once a mount, here in the daemon); null when there is none. A
// default one that cannot be used is only a warning.
Result<std::unique_ptr<DiskTier>> OpenTier(const TierPlan& plan, const Opened& opened) {
  if (!plan.why_none.empty()) spdlog::warn("{}", plan.why_none);
  if (!plan.options) return std::unique_ptr<DiskTier>();
  auto tier = DiskTier::Open(*plan.options);
  if (!tier) {
    if (plan.asked) return tier.error();
    spdlog::warn("no disk cache: {}", tier.error().message);
    return std::unique_ptr<DiskTier>();
  }
  if (plan.sized_by_default) {
    if (!plan.slow_source.empty()) {
      fmt::print(stderr,
                 "gpufsd: {} is on {}, slower to read than a local disk: what is read is "
                 "kept on local disk too (--no-disk-cache: not)\n",
                 opened.dataset.dir.string(), plan.slow_source);
    }
    TellDefaultBound(**tier, plan, opened.dataset.catalog);
  }
  return tier;
}

// Page-locks and maps the whole arena for the GPU once, here, so that copies from it run
// at full speed and no batch ever pays for registration.
GpuInfo RegisterWithGpu(const MountArgs& args, CacheStack& stack) {
  GpuInfo info;
  if (!args.gpu_register) return info;
  stack.stager = gpu::MakeDeviceStager();
  info.device = stack.stager->description();
  if (!stack.stager->on_device()) return info;
  const auto start = std::chrono::steady_clock::now();
  Status s = stack.stager->RegisterHost(stack.arena->base(), stack.arena->capacity());
  info.register_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!s) {
    spdlog::warn("the pinned cache stays unregistered with {}: {}", info.device, s.error().message);
    return info;
  }
  info.registered = true;
  info.bytes = stack.arena->capacity();
  spdlog::info("registered the {:.1f} MiB pinned cache with {} for DMA in {:.1f} ms",
               info.bytes / 1048576.0, info.device, info.register_ms);
  return info;
}

std::unique_ptr<IoEngine> MakeEngine(const MountArgs& args, EngineChoice choice, const Dataset& d,
                                     PinnedArena* a) {
  if (choice == EngineChoice::kUring && a) {
    UringOptions options{args.io_threads, args.queue_depth, a->base(), a->capacity(),
                         static_cast<unsigned>(std::min<size_t>(d.catalog.blobs().size(), 65536))};
    std::string fallback;
    auto engine = MakeIoEngine(options, args.io_threads, &fallback);
    if (!fallback.empty()) spdlog::warn("{}; reading with pread instead", fallback);
    return engine;
  }
  return std::make_unique<PreadEngine>(args.io_threads);
}

// Remote blobs go as ranged GETs of this size, all in flight at once.
constexpr uint64_t kRemotePart = 8 << 20;

// Where misses go: the local blob files through the I/O engine (which reads into the
// arena when there is one), or the store.
void MakeStoredSource(const MountArgs& args, const MountPlan& plan, const Opened& opened,
                      CacheStack& stack) {
  const Dataset& dataset = opened.dataset;
  if (opened.location) {
    stack.store = std::make_unique<remote::ObjectStore>(opened.location->config);
    stack.source = std::make_unique<remote::RemoteSource>(
        *stack.store, opened.objects, dataset.blobs, args.io_size ? args.io_size : kRemotePart,
        opened.digests);
    return;
  }
  stack.blobs = std::make_unique<BlobFiles>(dataset.dir, dataset.catalog.blobs(), dataset.blobs);
  stack.engine = MakeEngine(args, plan.engine, dataset, stack.arena.get());
  stack.source = std::make_unique<LocalSource>(*stack.blobs, *stack.engine, args.io_size);
}

// The path of the member whose bytes hold decoded `offset` of `blob`, for messages; a walk
// of the file table, which only a failure pays.
std::string MemberAt(const Catalog& catalog, uint32_t blob, uint64_t offset) {
  for (uint32_t i = 0; i < catalog.file_count(); ++i) {
    const FileExtent e = catalog.ExtentAt(i);
    if (catalog.Group(e.group).blob == blob && offset >= e.offset &&
        (offset < e.offset + e.size || (e.size == 0 && offset == e.offset))) {
      return catalog.PathOf(catalog.FileNode(i));
    }
  }
  return {};
}

// A compressed archive's groups are decoded over the source of its stored bytes.
void DecodeOver(const Dataset& dataset, CacheStack& stack) {
  if (dataset.plans.empty()) return;
  stack.stored = std::move(stack.source);
  const Catalog* catalog = &dataset.catalog;
  stack.source = std::make_unique<DecodedSource>(
      *stack.stored, dataset.plans,
      [catalog](uint32_t blob, uint64_t offset) { return MemberAt(*catalog, blob, offset); });
}

// The stored source, and over it the decoding of a compressed archive's groups.
void MakeSource(const MountArgs& args, const MountPlan& plan, const Opened& opened,
                CacheStack& stack) {
  MakeStoredSource(args, plan, opened, stack);
  DecodeOver(opened.dataset, stack);
}

// With --world-size N, each node reads about 1/N of every group per epoch. Whole groups
// pay when the node keeps the dataset (pinned cache plus disk tier): the first epoch
// brings N times the node's share, and every later one is local. When it cannot keep it,
// every epoch would bring N times its share again, so members are read alone.
bool WholeGroups(const MountArgs& args, const Dataset& dataset, const DiskTier* tier) {
  if (args.world_size <= 1) return true;
  const uint64_t room = args.cache_bytes + (tier ? tier->Room() : 0);
  const uint64_t need = dataset.catalog.total_bytes();
  const bool whole = WholeGroupsPay(args, room, need);
  spdlog::info(
      "--world-size {}: this node can keep {:.1f} GiB of the {:.1f} GiB dataset, so "
      "it reads {}",
      args.world_size, room / 1073741824.0, need / 1073741824.0,
      whole ? "whole groups and keeps them" : "each file alone (no group loads)");
  return whole;
}

// How files of groups the budget cannot pin will be read, and why.
void TellMissReads(const nlohmann::json& m) {
  using namespace miss_read_stat;
  const double predicted = m[kKeptPredicted].get<double>();
  spdlog::info(
      "files of groups not pinned: read {} (--miss-reads {}); the device is {}, a request "
      "costs as much as {}; the page cache can keep {:.0f}% of the dataset beyond the budget",
      m[kChoice].get<std::string>() == miss_read_name::kGroups
          ? "with their groups, through the page cache"
          : "alone",
      m[kMode].get<std::string>(), m[kDevice].get<std::string>(),
      FormatSize(static_cast<uint64_t>(m[kBreakEven].get<double>())), predicted * 100);
}

// Unlocked, the cache may be swapped out under memory pressure (a read then waits on the
// swap device) and every transfer into it must pin pages anew.
void WarnUnlocked(uint64_t budget) {
  struct rlimit limit {};
  getrlimit(RLIMIT_MEMLOCK, &limit);
  const std::string allowed =
      limit.rlim_cur == RLIM_INFINITY ? "unlimited" : fmt::format("{} KiB", limit.rlim_cur / 1024);
  spdlog::warn(
      "the cache's {:.1f} MiB are not locked in memory (locked memory allowed: {}): the "
      "kernel may swap them out; allow it with `ulimit -l unlimited`, LimitMEMLOCK=infinity "
      "in a systemd unit, or CAP_IPC_LOCK",
      budget / 1048576.0, allowed);
}

// The group cache over the source, with the planned tier opened beneath it.
Status MakeGroupCache(const MountArgs& args, const MountPlan& plan, const Opened& opened,
                      CacheStack& stack) {
  const Dataset& dataset = opened.dataset;
  GroupSizes sizes(dataset.catalog.group_count(), 0);
  for (const PackedExtent& f : dataset.catalog.tables().extents) ++sizes[f.group];
  stack.policy = MakePolicy(args.policy, std::move(sizes), dataset.catalog.file_count());
  auto tier = OpenTier(plan.tier, opened);
  if (!tier) return tier.error();
  stack.tier = std::move(*tier);
  const CacheOptions options = PlanCacheOptions(
      args, CacheInputs{stack.source->PartSize(), stack.source->DemandSize(),
                        stack.source->PartsInFlight(), PageCacheRoom(args.cache_bytes),
                        WholeGroups(args, dataset, stack.tier.get()), opened.digests,
                        stack.source->LatencyTracksQueue()});
  stack.cache = std::make_unique<GroupCache>(dataset.catalog, *stack.source, *stack.arena,
                                             std::move(stack.policy), options, stack.tier.get());
  spdlog::info(
      "cache: {:.1f} MiB, taken as it fills, {}, {} source{}, reads of {} KiB ({} in "
      "flight), memory {}locked{}",
      args.cache_bytes / 1048576.0, args.policy, stack.source->kind(),
      stack.engine ? fmt::format(" ({})", stack.engine->name()) : "", options.io_piece / 1024,
      options.reads_in_flight, stack.arena->locked() ? "" : "not ",
      stack.arena->huge_pages() ? ", huge pages" : "");
  return Ok{};
}

}  // namespace

Result<Opened> OpenForMount(const MountArgs& args, MountPlan& plan) {
  OpenOptions open_options;
  open_options.group_size = args.group_size;
  open_options.cache_dir = DefaultCacheDir();
  // What the user can fix without waiting for a listing is checked before it.
  if (Status s = CheckCacheFits(args); !s) return s.error();
  if (Status s = PrepareMountpoint(args.mountpoint, args.allow_non_empty); !s) return s.error();
  // A tar's first listing walks every header (tens of seconds at millions of members; a
  // remote one a round trip each): shown when it takes more than a moment.
  Progress progress;
  open_options.progress = &progress;
  std::optional<Result<Opened>> result;
  {
    ProgressBar bar("listing " + args.source, progress, std::chrono::seconds(2));
    result.emplace(OpenAnySource(args, plan, open_options));
  }
  Result<Opened>& opened = *result;
  if (!opened) return opened.error();
  for (const std::string& note : opened->dataset.notes) {
    fmt::print(stderr, "gpufsd: note: {}\n", note);
  }
  // Parsing freed far more than the catalog keeps; hand it back rather than sit on it.
  malloc_trim(0);
  if (args.verify && !opened->dataset.catalog.has_checksums()) {
    return Fail(EINVAL, "cannot --verify {}: it has no checksums", args.source);
  }
  // The tier's folder is named after the dataset: planned now, opened by the daemon.
  const bool remote = opened->location.has_value();
  auto tier =
      PlanTier(args, remote, opened->Label(), ObserveTier(args, remote, opened->dataset.dir));
  if (!tier) return tier.error();
  plan.tier = std::move(*tier);
  return opened;
}

Result<CacheStack> MakeCacheStack(const MountArgs& args, const MountPlan& plan,
                                  const Opened& opened) {
  const Dataset& dataset = opened.dataset;
  CacheStack stack;
  if (args.cache_bytes == 0) {  // member reads only, on the reader's thread
    MakeSource(args, plan, opened, stack);
    return stack;
  }
  // Faulted in a window ahead of the reads (PinnedArena::kDefaultAhead), never past what the
  // dataset can fill (each group's start is page-aligned in the arena).
  const uint64_t fill =
      dataset.catalog.total_bytes() + uint64_t{dataset.catalog.group_count()} * PinnedArena::kAlign;
  auto arena = PinnedArena::Create(args.cache_bytes, std::min<uint64_t>(args.cache_bytes, fill));
  if (!arena) return arena.error();
  stack.arena = std::move(*arena);
  if (!stack.arena->locked()) WarnUnlocked(args.cache_bytes);
  stack.gpu = RegisterWithGpu(args, stack);
  MakeSource(args, plan, opened, stack);
  if (Status s = MakeGroupCache(args, plan, opened, stack); !s) return s.error();
  TellMissReads(stack.cache->Stats()[miss_read_stat::kMissReads]);
  if (stack.tier) {
    const nlohmann::json t = stack.tier->Stats();
    spdlog::info("disk cache: {} (up to {})", t[tier_stat::kRoot].get<std::string>(),
                 FormatSize(stack.tier->Room()));
  }
  return stack;
}

}  // namespace gpufs
