// gpufsd: serves grouped image datasets as a read-only ImageFolder tree, and makes and
// checks them.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <thread>

#include "cli/dataset_commands.h"
#include "cli/kernel_limits.h"
#include "cli/mount_command.h"
#include "cli/mount_point.h"
#include "cli/sizes.h"
#include "cli/usage.h"
#include "source/remote/http_url.h"

namespace {

unsigned DefaultThreads() { return std::max(4u, 2 * std::thread::hardware_concurrency()); }

// The group cache's default budget: a quarter of physical memory.
uint64_t DefaultCacheBytes() {
  const uint64_t memory = gpufs::PhysicalMemory();
  return memory > 0 ? memory / 4 : (1ull << 30);
}

void AddMountOptions(CLI::App& mount, gpufs::MountArgs& args) {
  mount
      .add_option("SRC", args.source,
                  "dataset: a native pack, a mytar folder (or its parent), or a .tar; a local "
                  "path, s3://BUCKET/PREFIX/ or http(s)://HOST/PATH/")
      ->required();
  mount.add_option("MNT", args.mountpoint, "existing empty folder to mount at")->required();
  mount.add_flag("--allow-non-empty", args.allow_non_empty,
                 "mount over a folder that holds files, hiding them while mounted");
  mount.add_option("--group-size,-g", args.group_size,
                   "group-size folder to use when SRC holds several");
  mount.add_flag("--foreground,-f", args.foreground, "stay in the foreground, log to stderr");
  mount.add_flag("--debug,-d", args.debug, "log every FUSE request (implies -f)");
  mount.add_option("--log-file", args.log.file,
                   "append the log to this file (default: stderr with -f; else syslog, or "
                   "gpufsd.log in $XDG_STATE_HOME/gpufs where there is no syslog)");
  mount.add_option("--log-level", args.log.level, "least severe lines logged")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  mount.add_option("-o", args.fuse_options,
                   "FUSE mount options, comma-separated (e.g. allow_other); repeatable");
  mount
      .add_option("--threads", args.max_threads,
                  "most FUSE worker threads (0: four per core, at least 16)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1024u));
  mount
      .add_option("--max-background", args.max_background,
                  "read-ahead requests the kernel may have in flight at once (0: --threads)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 65535u));
  mount
      .add_option("--max-readahead", args.max_readahead_kib,
                  "kernel read-ahead of the mount in KiB (needs root; 0 keeps the default)")
      ->capture_default_str();
  mount.add_option("--ready-fd", args.ready_fd,
                   "write \"ready\" to this descriptor once the mount serves requests");
  mount.add_flag("--verify", args.verify,
                 "check each file's checksum on its first read; a damaged file reads as EIO");
  args.cache_bytes = DefaultCacheBytes();
  mount
      .add_option("--cache-size", args.cache_bytes,
                  "pinned group cache budget, e.g. 8GiB; 0 serves straight from the blobs "
                  "(default: a quarter of RAM)")
      ->transform(gpufs::SizeValue());
  mount
      .add_option("--policy", args.policy,
                  "consume-once: drop groups served this epoch; pin: fill and keep; lru")
      ->check(CLI::IsMember({"consume-once", "pin", "lru"}))
      ->capture_default_str();
  mount.add_option("--disk-cache", args.disk_cache,
                   "keep groups in this folder too, between mounts and for other mounts of "
                   "the node (default for s3:// and http(s):// sources: "
                   "$XDG_CACHE_HOME/gpufs/tier)");
  mount
      .add_option("--disk-cache-size", args.disk_cache_bytes,
                  "bound on the disk cache folder, e.g. 500GiB (default: a quarter of its "
                  "file system; a tenth of the disk, at most 10 GiB, is left free in any "
                  "case)")
      ->transform(gpufs::SizeValue());
  mount.add_flag("--no-disk-cache", args.no_disk_cache,
                 "no disk cache, also for s3:// and http(s):// sources");
  mount.add_flag_callback(
      "--no-prefetch", [&args] { args.prefetch = false; },
      "load groups only when asked for, never ahead");
  mount.add_option("--prefetch-depth", args.prefetch_depth, "groups prefetched at once")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
  mount.add_option("--io-engine", args.io_engine, "io_uring, or pread where it is unavailable")
      ->check(CLI::IsMember({"io_uring", "pread"}))
      ->capture_default_str();
  mount.add_option("--io-threads", args.io_threads, "I/O threads (each owns a ring)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
  mount.add_option("--queue-depth", args.queue_depth, "reads in flight per I/O thread")
      ->capture_default_str()
      ->check(CLI::Range(1u, 4096u));
  mount
      .add_option("--io-size", args.io_size,
                  "group loads are read as pieces of this size; 0: the largest request the "
                  "blobs' device takes whole (local), 8 MiB (S3, HTTP)")
      ->transform(gpufs::SizeValue());
  mount
      .add_option("--reads-in-flight", args.reads_in_flight,
                  "prefetch reads of group loads in flight at once (a waiting reader's own read "
                  "goes beside them); the most, as the window adapts; 0: about 10 MiB (local), "
                  "--connections (S3, HTTP)")
      ->capture_default_str()
      ->check(CLI::Range(0u, 4096u));
  mount.add_option("--endpoint", args.endpoint,
                   "S3 endpoint URL, e.g. http://127.0.0.1:7480 (else AWS_ENDPOINT_URL, the "
                   "profile's endpoint_url, or AWS)");
  mount.add_flag("--no-sign-request", args.no_sign_request,
                 "send S3 requests unsigned (public buckets; no credentials needed)");
  mount.add_option("--connections", args.connections, "requests in flight to an S3 or HTTP source")
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  mount
      .add_option("--transfer-threads", args.transfer_threads,
                  "threads that move an S3 or HTTP source's bytes, the connections split "
                  "between them; 0: half the cores, from 2 to 8")
      ->check(CLI::Range(0u, 64u))
      ->capture_default_str();
  mount
      .add_option("--retry-seconds", args.retry_seconds,
                  "deadline of a failing request to an S3 or HTTP source: retried with "
                  "backoff until then (0: never), then the read fails with EIO")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  mount.add_option("--ca-bundle", args.ca_bundle,
                   "PEM file of the CAs a store's certificate may come from (else AWS_CA_BUNDLE "
                   "or the profile's ca_bundle for s3://, CURL_CA_BUNDLE or SSL_CERT_FILE for "
                   "https://, else the system's)");
  mount.add_flag("--no-verify-tls", args.no_verify_tls,
                 "do not check the store's certificate: for test rigs only, never in production");
  mount
      .add_option("--request-payer", args.request_payer,
                  "requester: read a requester-pays S3 bucket, the reads billed to you")
      ->check(CLI::IsMember({"requester"}));
  mount
      .add_option("--connect-timeout", args.connect_timeout_s,
                  "seconds a connection to the store or a peer may take to open")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  mount
      .add_option("--idle-timeout", args.idle_timeout_s,
                  "seconds a transfer may go without a byte before it counts as broken")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  mount
      .add_option("--min-rate", args.min_rate,
                  "bytes per second a transfer must average, e.g. 1MiB: each attempt ends "
                  "within --connect-timeout + --deadline-allowance + its size at this rate")
      ->transform(gpufs::SizeValue(1))
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
      ->capture_default_str();
  mount
      .add_option("--deadline-allowance", args.deadline_allowance_s,
                  "seconds each attempt may take beyond its size at --min-rate")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  auto* peers = mount.add_option(
      "--peers", args.peers,
      "the caching proxies of the job's nodes, http://HOST:PORT,...: each block of a blob is "
      "read through one of them (the same one on every node), then the store");
  mount.add_option("--peers-file", args.peers_file, "the --peers list in a file, one URL per line")
      ->excludes(peers);
  mount
      .add_option("--peer-block", args.peer_block,
                  "bytes each peer is asked for at most, aligned: the proxies' slice size")
      ->transform(gpufs::SizeValue())
      ->check(CLI::Range(uint64_t{4} << 10, uint64_t{1} << 30))
      ->capture_default_str();
  mount.add_option("--peer-secret-file", args.peer_secret_file,
                   "the job's secret (a file of mode 0600) that the peers ask of every request; "
                   "sent to the peers only");
  mount
      .add_option("--world-size", args.world_size,
                  "nodes (mounts, not ranks) a sharded sampler splits each epoch between: when "
                  "this node cannot keep the dataset, it then reads files alone, not groups")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  mount.add_option("--metrics", args.metrics,
                   "serve Prometheus metrics at http://HOST:PORT/metrics (off by default)");
  mount.add_flag_callback(
      "--no-gpu-register", [&args] { args.gpu_register = false; },
      "leave the pinned cache unregistered with the GPU (registering pins all of it at start)");
  auto& cache = args.cache;
  mount.add_option("--entry-timeout", cache.entry_timeout_s, "seconds the kernel caches names")
      ->capture_default_str();
  mount.add_option("--attr-timeout", cache.attr_timeout_s, "seconds the kernel caches attributes")
      ->capture_default_str();
  mount.add_flag_callback(
      "--no-keep-cache", [&cache] { cache.keep_cache = false; },
      "drop a file's page cache whenever it is opened again");
  mount
      .add_option_function<std::string>(
          "--readdirplus",
          [&cache](const std::string& mode) { cache.readdirplus = *gpufs::ParseDirPlus(mode); },
          "attributes with listings: auto (the first part of each, the rest once files of "
          "the folder are looked up), always, never")
      ->check(CLI::IsMember(
          std::vector<std::string>(gpufs::kDirPlusNames.begin(), gpufs::kDirPlusNames.end())))
      ->default_str(std::string(gpufs::DirPlusName(cache.readdirplus)));
  mount.add_flag_callback(
      "--no-readdirplus", [&cache] { cache.readdirplus = gpufs::DirPlus::kNever; },
      "the same as --readdirplus never");
  mount
      .add_option("--streaming", args.streaming,
                  "open files with direct I/O, past the page cache: auto (when the dataset is "
                  "larger than --cache-size), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  mount.add_flag_callback(
      "--open-calls", [&cache] { cache.no_open = false; },
      "answer every open() instead of letting the kernel skip them");
}

void AddPackOptions(CLI::App& pack, gpufs::PackArgs& args) {
  auto& o = args.options;
  pack.add_option("SRC", args.source, "an ImageFolder tree (<class>/... or <split>/<class>/...)")
      ->required();
  pack.add_option("OUT", args.out, "the dataset folder to create (absent or empty)")->required();
  pack.add_option("--seed", o.seed, "seed of the random grouping")->capture_default_str();
  pack.add_option("--order", args.order, "random: groups mix classes; class: by path")
      ->check(CLI::IsMember({"random", "class"}))
      ->capture_default_str();
  pack.add_option("--group-size", o.group_size, "most images per group");
  pack.add_option("--group-bytes", args.group_bytes,
                  "most bytes per group, e.g. 16MiB (the default, unless --group-size alone)")
      ->transform(gpufs::SizeValue());
  pack.add_option("--align", o.align, "align members to this many bytes (e.g. 4096)")
      ->capture_default_str();
  pack.add_option("--splits", args.splits, "split folders above the classes: auto, yes, no")
      ->check(CLI::IsMember({"auto", "yes", "no"}))
      ->capture_default_str();
  pack.add_option("--threads", o.threads, "blobs written at once")->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gpufsd: serve a grouped image dataset as a read-only ImageFolder tree"};
  app.set_version_flag("--version,-V", std::string("gpufsd ") + GPUFS_VERSION);
  app.require_subcommand(1);

  gpufs::MountArgs mount_args;
  CLI::App* mount = app.add_subcommand("mount", "mount a dataset (returns once it is usable)");
  AddMountOptions(*mount, mount_args);

  std::string unmount_point;
  CLI::App* unmount =
      app.add_subcommand("unmount", "unmount a gpufs mount and wait for its daemon to exit");
  unmount->add_option("MNT", unmount_point, "the mount point")->required();
  bool lazy = false;
  unmount->add_flag("--lazy,-z", lazy,
                    "detach it now, even in use; its daemon exits once the last user lets go");

  gpufs::PackArgs pack_args;
  pack_args.options.threads = DefaultThreads();
  CLI::App* pack = app.add_subcommand("pack", "pack an ImageFolder tree into a native dataset");
  AddPackOptions(*pack, pack_args);

  std::string source;
  std::optional<uint32_t> group_size;
  unsigned threads = DefaultThreads();
  CLI::App* index = app.add_subcommand(
      "index",
      "write a native index beside a mytar dataset, or add SHA-256 digests to a pack's "
      "(blobs stay as they are)");
  CLI::App* verify =
      app.add_subcommand("verify", "check every member and blob against its checksum");
  for (CLI::App* sub : {index, verify}) {
    sub->add_option("SRC", source, "the dataset")->required();
    sub->add_option("--group-size,-g", group_size, "group-size folder of a mytar dataset");
    sub->add_option("--threads", threads, "blobs read at once")->capture_default_str();
  }

  if (auto status = gpufs::ParseUsage(app, argc, argv)) return *status;
  // The options hold their own copies: ps and /proc/PID/cmdline need not show a password
  // or a presigned URL's signature.
  for (int i = 1; i < argc; ++i) gpufs::remote::HideSecretsInPlace(argv[i]);
  if (mount->parsed()) return gpufs::RunMount(mount_args);
  if (pack->parsed()) return gpufs::RunPack(pack_args);
  if (index->parsed()) return gpufs::RunIndex(source, group_size, threads);
  if (verify->parsed()) return gpufs::RunVerify(source, group_size, threads);
  return gpufs::RunUnmount(unmount_point, lazy);
}
