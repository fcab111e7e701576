// `gpufsd mount` and `gpufsd unmount`: wiring of the dataset, the filesystem core and a
// FUSE session, plus the daemon's life cycle (detach, readiness, clean unmount).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/daemon_log.h"
#include "fuse/fuse_ops.h"
#include "source/remote/deadline.h"

namespace gpufs {

inline double Seconds(std::chrono::milliseconds d) { return d.count() / 1000.0; }

struct MountArgs {
  std::string source;
  std::string mountpoint;
  std::optional<uint32_t> group_size;
  bool foreground = false;
  bool allow_non_empty = false;  // mount over a folder with files in it, hiding them
  LogOptions log;
  bool debug = false;
  std::vector<std::string> fuse_options;  // each a comma-separated -o list
  unsigned max_threads = 0;               // 0: from the cores (ChooseKernelLimits)
  unsigned max_background = 0;            // 0: max_threads
  std::string streaming = "auto";         // direct I/O past the page cache: auto, on, off
  unsigned max_readahead_kib = 1024;      // 0 keeps the kernel's default
  int ready_fd = -1;                      // written "ready\n" once the mount serves requests
  bool verify = false;                    // check checksums on first read
  uint64_t cache_bytes = 0;               // group cache budget; 0: no cache
  std::string policy = "consume-once";
  bool prefetch = true;
  unsigned prefetch_depth = 8;         // groups prefetched at once
  std::string io_engine = "io_uring";  // or "pread"
  unsigned io_threads = 2;
  unsigned queue_depth = 64;
  uint64_t io_size = 0;  // group loads are read as pieces this large; 0: the source's choice
  unsigned reads_in_flight = 0;  // pieces of group loads in flight; 0: the source's choice
  CachePolicy cache;
  // The disk tier: on for s3:// and http(s):// sources, and wherever a folder is named.
  std::string disk_cache;         // its folder; empty: the default for remote sources
  uint64_t disk_cache_bytes = 0;  // bound on the folder; 0: what the disk can spare
  bool no_disk_cache = false;
  std::string metrics;       // HOST:PORT of a Prometheus endpoint; empty: none
  bool gpu_register = true;  // register the pinned cache for DMA when a GPU is present
  // s3:// and http(s):// sources
  std::string endpoint;          // --endpoint: wins over AWS_ENDPOINT_URL and the profile
  bool no_sign_request = false;  // public buckets
  unsigned connections = 32;     // requests in flight to the store
  double retry_seconds = 20;     // a failing request is retried this long, then EIO
  std::string ca_bundle;         // --ca-bundle: the CAs a store's certificate must come from
  bool no_verify_tls = false;    // test rigs only: logged at every mount
  std::string request_payer;     // --request-payer requester: for requester-pays buckets
  // Threads the store's connections are split between; 0: half the cores, from 2 to 8.
  unsigned transfer_threads = 0;
  // Each attempt's limits (source/remote/deadline.h, whose defaults these are), in seconds
  // and bytes per second as the options take them.
  double connect_timeout_s = Seconds(remote::TransferDeadlines{}.connect);
  double idle_timeout_s = Seconds(remote::TransferDeadlines{}.idle);
  double deadline_allowance_s = Seconds(remote::TransferDeadlines{}.allowance);
  uint64_t min_rate = remote::TransferDeadlines{}.floor_rate;
  // The caching proxies of the job's nodes (source/remote/peers.h)
  std::string peers;              // --peers URL,URL,...
  std::string peers_file;         // --peers-file FILE: one URL per line
  uint64_t peer_block = 4 << 20;  // the proxies' slice size
  std::string peer_secret_file;   // the job's secret, sent to the peers only
  unsigned world_size = 1;        // nodes whose samplers split each epoch between them
};

// Returns the process exit status.
int RunMount(const MountArgs& args);
}  // namespace gpufs
