// The table of `gpufsd mount`'s options: the one place each is spelled (see
// mount_options.h for what is made from it).
#include "cli/options/mount_options.h"

namespace gpufs {
namespace {

using K = OptionKind;

template <auto Member>
auto& Field(MountArgs& args) {
  return args.*Member;
}
template <auto Outer, auto Inner>
auto& Field(MountArgs& args) {
  return (args.*Outer).*Inner;
}

constexpr std::string_view kMount = "Mount";
constexpr std::string_view kCache = "Memory cache";
constexpr std::string_view kDisk = "Disk cache";
constexpr std::string_view kLocal = "Local reads";
constexpr std::string_view kRemote = "S3 and HTTP sources";
constexpr std::string_view kDeadlines = "Deadlines of S3 and HTTP requests";
constexpr std::string_view kPeers = "Peers";
constexpr std::string_view kKernel = "Kernel";
constexpr std::string_view kLogs = "Logs and metrics";

constexpr std::string_view kGroups[] = {kMount,     kCache, kDisk,   kLocal, kRemote,
                                        kDeadlines, kPeers, kKernel, kLogs};

constexpr const auto& kPolicies = policy_name::kAll;
constexpr const auto& kMissReads = miss_read_name::kAll;
constexpr const auto& kEngines = engine_name::kAll;
constexpr const auto& kTransports = fuse_transport_name::kAll;
constexpr std::string_view kOnOff[] = {"auto", "on", "off"};
constexpr std::string_view kPayers[] = {"requester"};
constexpr std::string_view kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};

const MountOption kTable[] = {
    // Mount
    {.name = "group-size",
     .group = kMount,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::group_size>,
     .help = "group-size folder to use when SRC holds several",
     .default_text = "the only one",
     .short_name = 'g',
     .low = 1,
     .high = 1u << 20},
    {.name = "allow-non-empty",
     .group = kMount,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::allow_non_empty>,
     .help =
         "mount over a folder that holds files, hiding them while mounted (fstab: nonempty too)"},
    {.name = "verify",
     .group = kMount,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::verify>,
     .help = "check each file's checksum on its first read; a damaged file reads as EIO"},
    {.name = "foreground",
     .group = kMount,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::foreground>,
     .help = "stay in the foreground, log to stderr",
     .short_name = 'f',
     .fstab = false},
    {.name = "ready-fd",
     .group = kMount,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::ready_fd>,
     .help = "write \"ready\" to this descriptor once the mount serves requests",
     .default_text = "none",
     .high = 1 << 20,
     .fstab = false},
    {.name = "sloppy",
     .group = kMount,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::sloppy>,
     .help =
         "drop -o options gpufs does not know with a warning, instead of refusing them (mount -s)"},
    {.name = "dry-run",
     .group = kMount,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::dry_run>,
     .help =
         "check the options and print them as gpufsd mount's arguments; mount nothing (mount -f)",
     .fstab = false},
    // Memory cache
    {.name = "cache-size",
     .group = kCache,
     .kind = K::kSize,
     .field = &Field<&MountArgs::cache_bytes>,
     .help = "pinned group cache budget, e.g. 8GiB; 0 serves straight from the blobs",
     .default_text = "a quarter of RAM, at most the dataset",
     .low = 4096},
    {.name = "policy",
     .group = kCache,
     .kind = K::kChoice,
     .field = &Field<&MountArgs::policy>,
     .help = "consume-once: drop groups served this epoch; pin: fill and keep; lru",
     .choices = kPolicies},
    {.name = "miss-reads",
     .group = kCache,
     .kind = K::kChoice,
     .field = &Field<&MountArgs::miss_reads>,
     .help =
         "how a file whose group is not pinned is read: groups (its whole group read ahead into "
         "the kernel's page cache, where its siblings find it), members (alone), auto (whichever "
         "costs the device less, given the memory beside --cache-size)",
     .choices = kMissReads},
    {.name = "no-prefetch",
     .group = kCache,
     .kind = K::kClear,
     .field = &Field<&MountArgs::prefetch>,
     .help = "load groups only when asked for, never ahead"},
    {.name = "prefetch-depth",
     .group = kCache,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::prefetch_depth>,
     .help = "groups prefetched at once",
     .low = 1,
     .high = 64},
    {.name = "world-size",
     .group = kCache,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::world_size>,
     .help =
         "nodes (mounts, not ranks) a sharded sampler splits each epoch between: when this node "
         "cannot keep the dataset, it then reads files alone, not groups",
     .low = 1,
     .high = 100000},
    {.name = "no-gpu-register",
     .group = kCache,
     .kind = K::kClear,
     .field = &Field<&MountArgs::gpu_register>,
     .help =
         "leave the pinned cache unregistered with the GPU (registering pins all of it at start)"},
    // Disk cache
    {.name = "disk-cache",
     .group = kDisk,
     .kind = K::kPath,
     .field = &Field<&MountArgs::disk_cache>,
     .help = "keep groups in this folder too, between mounts and for other mounts of the node",
     .default_text = "$XDG_CACHE_HOME/gpufs/tier for s3:// and http(s)://; none for local sources"},
    {.name = "disk-cache-size",
     .group = kDisk,
     .kind = K::kSize,
     .field = &Field<&MountArgs::disk_cache_bytes>,
     .help = "bound on the disk cache folder, e.g. 500GiB; a tenth of the disk, at most 10 GiB, is "
             "left free in any case",
     .default_text = "a quarter of its file system",
     .low = 4096},
    {.name = "no-disk-cache",
     .group = kDisk,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::no_disk_cache>,
     .help = "no disk cache, also for s3:// and http(s):// sources"},
    // Local reads
    {.name = "io-engine",
     .group = kLocal,
     .kind = K::kChoice,
     .field = &Field<&MountArgs::io_engine>,
     .help = "io_uring, or pread where it is unavailable",
     .choices = kEngines},
    {.name = "io-threads",
     .group = kLocal,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::io_threads>,
     .help = "I/O threads (each owns a ring)",
     .low = 1,
     .high = 64},
    {.name = "queue-depth",
     .group = kLocal,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::queue_depth>,
     .help = "reads in flight per I/O thread",
     .low = 1,
     .high = 4096},
    {.name = "io-size",
     .group = kLocal,
     .kind = K::kSize,
     .field = &Field<&MountArgs::io_size>,
     .help = "group loads are read as pieces of this size",
     .default_text = "the largest request the blobs' device takes whole (local), 8MiB (S3, HTTP)",
     .low = 4096},
    {.name = "reads-in-flight",
     .group = kLocal,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::reads_in_flight>,
     .help = "prefetch reads of group loads in flight at once, the most as the window adapts (a "
             "waiting reader's own read goes beside them)",
     .default_text = "about 10 MiB of reads (local), --connections (S3, HTTP)",
     .high = 4096},
    // S3 and HTTP sources
    {.name = "endpoint",
     .group = kRemote,
     .kind = K::kText,
     .field = &Field<&MountArgs::location, &remote::LocationOptions::endpoint>,
     .help = "S3 endpoint URL, e.g. http://127.0.0.1:7480",
     .default_text = "AWS_ENDPOINT_URL, the profile's endpoint_url, or AWS"},
    {.name = "no-sign-request",
     .group = kRemote,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::location, &remote::LocationOptions::no_sign_request>,
     .help = "send S3 requests unsigned (public buckets; no credentials needed)"},
    {.name = "request-payer",
     .group = kRemote,
     .kind = K::kChoice,
     .field = &Field<&MountArgs::request_payer>,
     .help = "requester: read a requester-pays S3 bucket, the reads billed to you",
     .default_text = "the owner pays",
     .choices = kPayers},
    {.name = "ca-bundle",
     .group = kRemote,
     .kind = K::kPath,
     .field = &Field<&MountArgs::location, &remote::LocationOptions::ca_bundle>,
     .help = "PEM file of the CAs a store's certificate may come from",
     .default_text =
         "AWS_CA_BUNDLE or the profile's ca_bundle (s3://), CURL_CA_BUNDLE or SSL_CERT_FILE "
         "(https://), else the system's"},
    {.name = "no-verify-tls",
     .group = kRemote,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::no_verify_tls>,
     .help = "do not check the store's certificate: for test rigs only, never in production"},
    {.name = "connections",
     .group = kRemote,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::location, &remote::LocationOptions::connections>,
     .help = "requests in flight to an S3 or HTTP source",
     .low = 1,
     .high = 1024},
    {.name = "transfer-threads",
     .group = kRemote,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::transfer_threads>,
     .help = "threads that move an S3 or HTTP source's bytes, the connections split between them",
     .default_text = "half the cores, from 2 to 8",
     .high = 64},
    // Deadlines
    {.name = "retry-seconds",
     .group = kDeadlines,
     .kind = K::kSeconds,
     .field = &Field<&MountArgs::retry_budget>,
     .help = "deadline of a failing request: retried with backoff until then (0: never), then the "
             "read fails with EIO",
     .high = 3600},
    {.name = "connect-timeout",
     .group = kDeadlines,
     .kind = K::kSeconds,
     .field = &Field<&MountArgs::deadlines, &remote::TransferDeadlines::connect>,
     .help = "seconds a connection to the store or a peer may take to open",
     .low = 0.1,
     .high = 600},
    {.name = "idle-timeout",
     .group = kDeadlines,
     .kind = K::kSeconds,
     .field = &Field<&MountArgs::deadlines, &remote::TransferDeadlines::idle>,
     .help = "seconds a transfer may go without a byte before it counts as broken",
     .low = 1,
     .high = 3600},
    {.name = "min-rate",
     .group = kDeadlines,
     .kind = K::kSize,
     .field = &Field<&MountArgs::deadlines, &remote::TransferDeadlines::floor_rate>,
     .help =
         "bytes per second a transfer must average: each attempt ends within --connect-timeout + "
         "--deadline-allowance + its size at this rate",
     .low = 1,
     .high = 1099511627776.0},
    {.name = "deadline-allowance",
     .group = kDeadlines,
     .kind = K::kSeconds,
     .field = &Field<&MountArgs::deadlines, &remote::TransferDeadlines::allowance>,
     .help = "seconds each attempt may take beyond its size at --min-rate",
     .high = 3600},
    // Peers
    {.name = "peers",
     .group = kPeers,
     .kind = K::kText,
     .field = &Field<&MountArgs::peers>,
     .help =
         "the caching proxies of the job's nodes, http://HOST:PORT,...: each block of a blob is "
         "read through one of them (the same one on every node), then the store (in fstab: "
         "peers_file)",
     .default_text = "none",
     .fstab = false},
    {.name = "peers-file",
     .group = kPeers,
     .kind = K::kPath,
     .field = &Field<&MountArgs::peers_file>,
     .help = "the --peers list in a file, one URL per line",
     .default_text = "none"},
    {.name = "peer-block",
     .group = kPeers,
     .kind = K::kSize,
     .field = &Field<&MountArgs::peer_block>,
     .help = "bytes each peer is asked for at most, aligned: the proxies' slice size",
     .low = 4096,
     .high = 1u << 30},
    {.name = "peer-secret-file",
     .group = kPeers,
     .kind = K::kPath,
     .field = &Field<&MountArgs::peer_secret_file>,
     .help = "the job's secret (a file of mode 0600) that the peers ask of every request; sent to "
             "the peers only",
     .default_text = "none"},
    // Kernel
    {.name = "threads",
     .group = kKernel,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::max_threads>,
     .help = "most FUSE worker threads",
     .default_text = "four per core, at least 16",
     .high = 1024},
    {.name = "fuse-transport",
     .group = kKernel,
     .kind = K::kChoice,
     .field = &Field<&MountArgs::fuse_transport>,
     .help =
         "how the kernel's requests reach gpufsd: io_uring (FUSE over io_uring, Linux 6.14+ with "
         "the fuse module's enable_uring set), dev_fuse (read and write on /dev/fuse), auto "
         "(io_uring where the kernel has it on)",
     .choices = kTransports},
    {.name = "max-background",
     .group = kKernel,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::max_background>,
     .help = "read-ahead requests the kernel may have in flight at once",
     .default_text = "--threads",
     .high = 65535},
    {.name = "max-readahead",
     .group = kKernel,
     .kind = K::kNumber,
     .field = &Field<&MountArgs::max_readahead_kib>,
     .help = "kernel read-ahead of the mount in KiB (needs root; 0 keeps the kernel's)",
     .high = 1u << 20},
    {.name = "streaming",
     .group = kKernel,
     .kind = K::kChoice,
     .field = &Field<&MountArgs::streaming>,
     .help =
         "open files with direct I/O, past the page cache: auto (when the dataset is larger than "
         "--cache-size and than the memory beside it), on, off",
     .choices = kOnOff},
    {.name = "entry-timeout",
     .group = kKernel,
     .kind = K::kSeconds,
     .field = &Field<&MountArgs::cache, &CachePolicy::entry_timeout_s>,
     .help = "seconds the kernel caches names",
     .high = 1e9},
    {.name = "attr-timeout",
     .group = kKernel,
     .kind = K::kSeconds,
     .field = &Field<&MountArgs::cache, &CachePolicy::attr_timeout_s>,
     .help = "seconds the kernel caches attributes",
     .high = 1e9},
    {.name = "no-keep-cache",
     .group = kKernel,
     .kind = K::kClear,
     .field = &Field<&MountArgs::cache, &CachePolicy::keep_cache>,
     .help = "drop a file's page cache whenever it is opened again"},
    {.name = "readdirplus",
     .group = kKernel,
     .kind = K::kChoice,
     .field = &Field<&MountArgs::cache, &CachePolicy::readdirplus>,
     .help = "attributes with listings: auto (the first part of each, the rest once files of the "
             "folder are looked up), always, never",
     .choices = kDirPlusNames},
    {.name = "no-readdirplus",
     .group = kKernel,
     .kind = K::kFixed,
     .field = &Field<&MountArgs::cache, &CachePolicy::readdirplus>,
     .help = "the same as --readdirplus never",
     .fixed = "never"},
    {.name = "open-calls",
     .group = kKernel,
     .kind = K::kClear,
     .field = &Field<&MountArgs::cache, &CachePolicy::no_open>,
     .help = "answer every open() instead of letting the kernel skip them"},
    // Logs and metrics
    {.name = "log-file",
     .group = kLogs,
     .kind = K::kPath,
     .field = &Field<&MountArgs::log, &LogOptions::file>,
     .help = "append the log to this file",
     .default_text =
         "stderr with -f; else syslog, or gpufsd.log in $XDG_STATE_HOME/gpufs without syslog"},
    {.name = "log-level",
     .group = kLogs,
     .kind = K::kChoice,
     .field = &Field<&MountArgs::log, &LogOptions::level>,
     .help = "least severe lines logged",
     .choices = kLevels},
    {.name = "debug",
     .group = kLogs,
     .kind = K::kFlag,
     .field = &Field<&MountArgs::debug>,
     .help = "log every FUSE request (implies -f)",
     .short_name = 'd',
     .fstab = false},
    {.name = "metrics",
     .group = kLogs,
     .kind = K::kText,
     .field = &Field<&MountArgs::metrics>,
     .help = "serve Prometheus metrics at http://HOST:PORT/metrics",
     .default_text = "off"},
};

// Passed on to libfuse and the kernel as they are.
constexpr std::string_view kFuseOptions[] = {
    "allow_other", "allow_root", "auto_unmount", "default_permissions",
    "nodev",       "dev",        "nosuid",       "suid",
    "noexec",      "exec",       "noatime",      "atime",
    "sync",        "async",      "dirsync",      "max_read"};
// Meant for mount(8), fstab and systemd. A gpufs mount is read-only whatever ro or rw
// says, so the other atime options change nothing either.
constexpr std::string_view kMountOnly[] = {
    "ro",       "rw",         "defaults",    "auto",          "noauto",     "user",
    "nouser",   "users",      "owner",       "group",         "_netdev",    "nofail",
    "relatime", "norelatime", "strictatime", "nostrictatime", "diratime",   "nodiratime",
    "lazytime", "nolazytime", "comment",     "loop",          "nosymfollow"};

}  // namespace

std::span<const MountOption> MountOptionTable() { return kTable; }
std::span<const std::string_view> MountOptionGroups() { return kGroups; }
std::span<const std::string_view> FuseMountOptions() { return kFuseOptions; }
std::span<const std::string_view> MountOnlyOptions() { return kMountOnly; }

}  // namespace gpufs
