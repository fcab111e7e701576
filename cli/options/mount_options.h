// The options of `gpufsd mount`, each declared once in a table (mount_option_table.cc):
// its name, which is also its fstab key (`--cache-size` is `cache_size=` in -o), its
// group in --help, its kind and range, its help and, where the default is computed at
// mount, how a person would say it. The parser, the -o keys of fstab and mount(8), the
// `gpufsd options` listing and the user guide's table are all made from it; each option's
// default is the one of the field it fills (MountArgs below, or the component struct
// MountArgs holds).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/error.h"
#include "cache/miss_reads.h"
#include "cache/policy/policy.h"
#include "fs/kernel_stat.h"
#include "fuse/fuse_ops.h"
#include "source/io_engine.h"
#include "source/remote/location.h"
#include "source/remote/transfer/deadline.h"

namespace CLI {
class App;
}

namespace gpufs {

// Where and how much the daemon logs (daemon_log.h).
struct LogOptions {
  std::string file;            // --log-file; empty: syslog, else the default file
  std::string level = "info";  // --log-level: trace, debug, info, warn, error, off
};

struct MountArgs {
  std::string source;
  std::string mountpoint;
  std::optional<uint32_t> group_size;
  bool foreground = false;
  bool allow_non_empty = false;  // mount over a folder with files in it, hiding them
  bool sloppy = false;           // -o keys nobody knows are dropped with a warning
  bool dry_run = false;          // print the mount's options, mount nothing
  LogOptions log;
  bool debug = false;
  std::vector<std::string> fuse_options;  // each a comma-separated -o list for libfuse
  unsigned max_threads = 0;               // 0: from the cores (ChooseKernelLimits)
  unsigned max_background = 0;            // 0: max_threads
  std::string streaming = "auto";         // direct I/O past the page cache: auto, on, off
  std::string fuse_transport{fuse_transport_name::kAuto};  // fuse_transport_name
  unsigned max_readahead_kib = 1024;                       // 0 keeps the kernel's default
  int ready_fd = -1;                           // written "ready\n" once the mount serves requests
  bool verify = false;                         // check checksums on first read
  uint64_t cache_bytes = DefaultCacheBytes();  // group cache budget; 0: no cache
  std::string policy{policy_name::kConsumeOnce};
  std::string miss_reads{miss_read_name::kAuto};  // auto, groups, members
  bool prefetch = true;
  unsigned prefetch_depth = 8;                 // groups prefetched at once
  std::string io_engine{engine_name::kUring};  // engine_name
  unsigned io_threads = 2;
  unsigned queue_depth = 64;
  uint64_t io_size = 0;  // group loads are read as pieces this large; 0: the source's choice
  unsigned reads_in_flight = 0;  // pieces of group loads in flight; 0: the source's choice
  CachePolicy cache;             // the kernel's caching of names, attributes and pages
  // The disk tier: on for s3:// and http(s):// sources, and wherever a folder is named.
  std::string disk_cache;         // its folder; empty: the default for remote sources
  uint64_t disk_cache_bytes = 0;  // bound on the folder; 0: what the disk can spare
  bool no_disk_cache = false;
  std::string metrics;       // HOST:PORT of a Prometheus endpoint; empty: none
  bool gpu_register = true;  // register the pinned cache for DMA when a GPU is present
  // s3:// and http(s):// sources: the endpoint, signing, connections and CAs as the
  // resolver takes them, then the store's deadlines.
  remote::LocationOptions location;
  std::chrono::milliseconds retry_budget = remote::StoreConfig{}.retry_budget;
  bool no_verify_tls = false;     // test rigs only: logged at every mount
  std::string request_payer;      // --request-payer requester: for requester-pays buckets
  unsigned transfer_threads = 0;  // 0: the store's own choice from the cores
  remote::TransferDeadlines deadlines;
  // The caching proxies of the job's nodes (source/remote/address/peers.h)
  std::string peers;              // --peers URL,URL,...
  std::string peers_file;         // --peers-file FILE: one URL per line
  uint64_t peer_block = 4 << 20;  // the proxies' slice size
  std::string peer_secret_file;   // the job's secret, sent to the peers only
  unsigned world_size = 1;        // nodes whose samplers split each epoch between them

  // The group cache's default budget: a quarter of physical memory.
  static uint64_t DefaultCacheBytes();
};

enum class OptionKind {
  kFlag,     // --name sets the field true
  kClear,    // --no-name sets the field false
  kFixed,    // --name sets the field to `fixed` (an alias of another option's value)
  kNumber,   // a whole number within [low, high]
  kSize,     // bytes as a person writes them (cli/options/sizes.h), at least `low` when bare
  kSeconds,  // seconds, fractions allowed, within [low, high]
  kChoice,   // one of `choices`
  kText,     // a word: an address, a level
  kPath,     // a file or folder
};

// Where an option's value goes: a field of MountArgs or of a struct it holds.
template <class T>
using FieldOf = T& (*)(MountArgs&);
using OptionField =
    std::variant<FieldOf<bool>, FieldOf<unsigned>, FieldOf<int>, FieldOf<uint64_t>, FieldOf<double>,
                 FieldOf<std::chrono::milliseconds>, FieldOf<std::string>,
                 FieldOf<std::optional<uint32_t>>, FieldOf<DirPlus>>;

struct MountOption {
  std::string_view name;  // without "--"; the fstab key is this with '_' for '-'
  std::string_view group;
  OptionKind kind;
  OptionField field;
  std::string_view help;
  std::string_view default_text = {};  // where the default is computed at mount
  std::span<const std::string_view> choices = {};
  std::string_view fixed = {};  // kFixed: the value set
  char short_name = 0;
  // kNumber, kSeconds: the range; kSize: the least bare number and the most (0: none).
  double low = 0, high = 0;
  bool fstab = true;  // false: meaningless in fstab (a descriptor, the foreground)
};

// The table, in the order of --help within each group.
std::span<const MountOption> MountOptionTable();
// The groups of --help, in order.
std::span<const std::string_view> MountOptionGroups();
// Options of -o for libfuse and the kernel, and those meant for mount(8) and fstab only.
std::span<const std::string_view> FuseMountOptions();
std::span<const std::string_view> MountOnlyOptions();

std::string FstabKey(const MountOption& option);
// Whether the option takes no value (it sets, clears or fixes its field).
bool IsFlag(const MountOption& option);
// What the option takes, as --help names it ("SIZE", "N", "{on,off}"); empty for a flag.
std::string ValueName(const MountOption& option);
// The value of `option` in `args`, as a person writes it ("8GiB", "20s", "on"); empty
// when unset or a flag that is off.
std::string ValueText(const MountOption& option, const MountArgs& args);
// What --help and the listings show as the default.
std::string DefaultText(const MountOption& option);

// Makes every path `args` holds absolute against the current folder: SRC when it is a local
// path, MNT, and each kPath option. The daemon works from '/' (it must not keep the
// caller's folder busy), and a path must mean there what it meant where it was typed.
void AnchorPaths(MountArgs& args);

// Refuses a --cache-size beyond the machine's memory, naming it: the cache is pinned, so
// it must fit in RAM beside everything else (checked by --dry-run too).
Status CheckCacheFits(const MountArgs& args);

// Declares the table's options (and -o) on `mount`, filling `args`.
void AddMountOptions(CLI::App& mount, MountArgs& args);
// `args` (gpufsd's, from the subcommand on) with each -o key of the table turned into its
// option ("-o cache_size=8GiB,allow_other" into "--cache-size 8GiB -o allow_other") and
// the keys meant for mount(8) dropped; EINVAL naming an unknown key and the nearest known
// one, unless --sloppy is among `args` (then it is dropped with a warning on stderr).
Result<std::vector<std::string>> ExpandMountOptions(std::vector<std::string> args);
// The options of `args` that differ from the defaults, as gpufsd mount's arguments.
std::vector<std::string> MountCommandLine(const MountArgs& args);
// Every option: name, fstab key, default and help, as text or a Markdown table.
std::string MountOptionListing(bool markdown);
// The same as JSON, for the man pages and the shell completion made from it: a list of
// {"group", "options": [{"name", "short", "value", "choices", "path", "fstab", "default",
// "help"}]}.
std::string MountOptionsJson();

}  // namespace gpufs
