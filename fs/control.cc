#include "fs/control.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include <tuple>

#include "cache/disk_tier.h"
#include "cache/account/stall_account.h"
#include "dataset/format/open_dataset.h"
#include "fs/problem_log.h"
#include "fs/residency.h"

namespace gpufs {
namespace {

// How many of the daemon's last warnings and errors a reply carries.
constexpr size_t kProblemsShown = 8;

void ReplyError(const ReplySink& reply, std::string_view message) {
  reply(nlohmann::json{{"error", message}}.dump() + "\n");
}

nlohmann::json CountJson(const PageCount& count) {
  return {{"resident_pages", count.resident}, {"total_pages", count.total}};
}

Result<ResidencyQuery> ParseQuery(const nlohmann::json& request) {
  ResidencyQuery query;
  query.path = request.value("path", "");
  const std::string list = request.value("list", "none");
  const std::string by = request.value("by", "none");
  if (list == "kernel") {
    query.list = ListFiles::kKernelKnown;
  } else if (list == "all") {
    query.list = ListFiles::kAll;
  } else if (list != "none") {
    return Fail(EINVAL, "unknown list '{}': use none, kernel or all", list);
  }
  if (by == "class") {
    query.by = GroupBy::kClass;
  } else if (by == "group") {
    query.by = GroupBy::kGroup;
  } else if (by != "none") {
    return Fail(EINVAL, "unknown by '{}': use none, class or group", by);
  }
  return query;
}

void ReplyResidency(const Filesystem& fs, const nlohmann::json& request, const ReplySink& reply) {
  auto query = ParseQuery(request);
  if (!query) return ReplyError(reply, query.error().message);
  // File lines are buffered and sent in large pieces; the header must come first, so the
  // lines wait in memory (about 60 bytes a file) until the walk has the totals.
  std::string lines;
  auto report = Residency(fs, *query, [&lines](const FileResidency& f) {
    fmt::format_to(std::back_inserter(lines), "{}{}{} {} {} {} {}\n", f.pinned ? 'p' : '-',
                   f.kernel_known ? 'k' : '-', f.on_disk ? 'd' : '-', f.size, f.group, f.class_id,
                   f.path);
  });
  if (!report) return ReplyError(reply, report.error().message);
  nlohmann::json header{{"files", report->files},
                        {"dirs", report->dirs},
                        {"page_size", kStatPageSize},
                        {"pinned", CountJson(report->pinned)},
                        {"classes", fs.catalog().classes()}};
  if (report->has_disk) header["disk"] = CountJson(report->disk);
  nlohmann::json buckets = nlohmann::json::array();
  for (const ResidencyBucket& b : report->buckets) {
    buckets.push_back({{"id", b.id}, {"files", b.files}, {"pinned", CountJson(b.pinned)}});
    if (report->has_disk) buckets.back()["disk"] = CountJson(b.disk);
  }
  header["buckets"] = std::move(buckets);
  header["problems"] = RecentProblems(kProblemsShown);
  if (const GroupCache* cache = fs.cache()) {
    const nlohmann::json stats = cache->Stats();
    header["memory"] = {{"budget_bytes", stats["budget_bytes"]},
                        {"taken_bytes", stats["arena_taken_bytes"]}};
  }
  reply(header.dump() + "\n");
  constexpr size_t kPiece = 1 << 20;
  for (size_t at = 0; at < lines.size(); at += kPiece) {
    reply(std::string_view(lines).substr(at, kPiece));
  }
}

}  // namespace

nlohmann::json StatsOf(const Filesystem& fs) {
  const Catalog& catalog = fs.catalog();
  const auto& served = fs.served();
  nlohmann::json j{{"pid", getpid()},
                   {"source", fs.options().source},
                   {"format", fs.options().format},
                   {"files", catalog.file_count()},
                   {"dirs", catalog.dir_count()},
                   {"bytes", catalog.total_bytes()},
                   {"groups", catalog.group_count()},
                   {"inodes", fs.references()},
                   {"served",
                    {{"reads", served.reads.load()},
                     {"bytes", served.bytes.load()},
                     {"files", served.files.load()}}}};
  j["cache"] = fs.cache() ? fs.cache()->Stats() : nlohmann::json();
  j["io"] = fs.source().Stats();
  j["kernel"] = fs.options().kernel;
  j["problems"] = RecentProblems(kProblemsShown);
  const GpuInfo& gpu = fs.options().gpu;
  j["gpu"] = {{"device", gpu.device},
              {"registered", gpu.registered},
              {"registered_bytes", gpu.bytes},
              {"register_ms", gpu.register_ms}};
  return j;
}

// The memory the kernel calls available (besides what the pinned arena already holds).
uint64_t MemoryAvailable() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

// What a disk tier in the default folder (the cache folder, where remote sources keep
// theirs) could take: its disk's free space less what a tier leaves free. The folder may
// not exist yet: its nearest existing parent is on the same disk.
uint64_t DiskAvailable() {
  std::filesystem::path dir = DefaultCacheDir();
  std::error_code ec;
  while (!std::filesystem::exists(dir, ec) && dir.has_parent_path() && dir != dir.parent_path()) {
    dir = dir.parent_path();
  }
  struct statvfs vfs {};
  if (statvfs(dir.c_str(), &vfs) != 0) return 0;
  const uint64_t free = uint64_t{vfs.f_bavail} * vfs.f_frsize;
  return free - std::min(free, DiskTier::DefaultKeepFree(uint64_t{vfs.f_blocks} * vfs.f_frsize));
}

void ReplyAdvice(const Filesystem& fs, const ReplySink& reply) {
  const GroupCache* cache = fs.cache();
  if (!cache) {
    return ReplyError(reply, "cannot advise: the mount has no cache (--cache-size 0)");
  }
  reply(cache->Advise(MemoryAvailable(), DiskAvailable()).dump() + "\n");
}

void HandleControlRequest(const Filesystem& fs, std::string_view request, const ReplySink& reply) {
  const nlohmann::json parsed = nlohmann::json::parse(request, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return ReplyError(reply, "cannot read the request: not a JSON object");
  }
  try {
    const std::string op = parsed.value("op", "");
    if (op == "stats") return reply(StatsOf(fs).dump() + "\n");
    if (op == "residency") return ReplyResidency(fs, parsed, reply);
    if (op == "advise") return ReplyAdvice(fs, reply);
    ReplyError(reply, fmt::format("unknown op '{}': use stats, residency or advise", op));
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
    ReplyError(reply, fmt::format("cannot read the request: {}", e.what()));
  }
}

namespace {

// The peer caches of an object store (--peers): one series per peer, labelled by its URL.
void PeerMetrics(const nlohmann::json& io, std::string& out) {
  if (!io.is_object() || !io.contains(source_stat::kPeers)) return;
  const nlohmann::json& peers = io[source_stat::kPeers];
  for (const auto& [key, name, type, help] :
       {std::tuple{"up", "peer_up", "gauge", "Whether the peer cache is asked (1) or skipped (0)."},
        {"requests", "peer_requests_total", "counter", "Requests sent to the peer cache."},
        {"bytes", "peer_bytes_total", "counter", "Bytes received from the peer cache."},
        {"failures", "peer_failures_total", "counter", "Requests the peer cache failed."}}) {
    fmt::format_to(std::back_inserter(out), "# HELP gpufs_{0} {1}\n# TYPE gpufs_{0} {2}\n", name,
                   help, type);
    for (const nlohmann::json& peer : peers) {
      const nlohmann::json& v = peer[key];
      fmt::format_to(std::back_inserter(out), "gpufs_{}{{peer=\"{}\"}} {}\n", name,
                     peer.value("url", ""),
                     v.is_boolean() ? int(v.get<bool>()) : v.get<uint64_t>());
    }
  }
}

// A signed store's credentials: where from (a label), expiry and refreshes.
void CredentialMetrics(const nlohmann::json& io, std::string& out) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kCredentials)) return;
  const nlohmann::json& c = io[kCredentials];
  std::string source = c.value(kCredentialSource, "");
  std::replace(source.begin(), source.end(), '"', '\'');
  std::replace(source.begin(), source.end(), '\\', '/');
  fmt::format_to(std::back_inserter(out),
                 "# HELP gpufs_{0}_info Where the store's credentials come from.\n"
                 "# TYPE gpufs_{0}_info gauge\ngpufs_{0}_info{{{1}=\"{2}\"}} 1\n",
                 kCredentials, kCredentialSource, source);
  for (const auto& [key, type, help] :
       {std::tuple{kCredentialExpiresIn, "gauge", "Seconds until the credentials expire."},
        {kCredentialRefreshes, "counter", "Credential refreshes that got keys."},
        {kCredentialRefreshFailures, "counter", "Credential refreshes that failed."}}) {
    const nlohmann::json v = c.value(key, nlohmann::json());
    if (!v.is_number()) continue;
    fmt::format_to(std::back_inserter(out),
                   "# HELP gpufs_{0}_{1} {2}\n# TYPE gpufs_{0}_{1} {3}\n"
                   "gpufs_{0}_{1} {4}\n",
                   kCredentials, key, help, type, v.dump());
  }
}

// The stall account's counters since the mount by where reads were served from, and the
// stall of the epoch in progress and of the last one that ended.
void StallMetrics(const nlohmann::json& stall, std::string& out) {
  using namespace stall_stat;
  if (!stall.is_object()) return;
  const nlohmann::json& from = stall[kTotals][kFrom];
  for (const auto& [key, metric, help] :
       {std::tuple{kReads, "reads_total", "Reads served, by where from."},
        {kBytes, "read_bytes_total", "Bytes served, by where from."},
        {kWaitS, "wait_seconds_total", "Seconds readers waited, by what on."},
        {kFetched, "fetched_bytes_total", "Bytes each tier read to serve reads."}}) {
    fmt::format_to(std::back_inserter(out),
                   "# HELP gpufs_stall_{0} {1}\n# TYPE gpufs_stall_{0} counter\n", metric, help);
    for (const char* tier : kServedFromNames) {
      fmt::format_to(std::back_inserter(out), "gpufs_stall_{}{{from=\"{}\"}} {}\n", metric, tier,
                     from[tier][key].dump());
    }
  }
  fmt::format_to(std::back_inserter(out),
                 "# HELP gpufs_stall_stalled_seconds_total Seconds at least one reader waited on "
                 "storage.\n# TYPE gpufs_stall_stalled_seconds_total counter\n"
                 "gpufs_stall_stalled_seconds_total {}\n",
                 stall[kTotals][kStalledS].dump());
  for (const auto& [key, help] :
       {std::pair{kStallFraction, "Share of the epoch's time a reader waited on storage."},
        {kDemandMbPerS, "MB/s the readers took while not waiting."},
        {kHitRatio, "1 - bytes from the source / bytes served, in the epoch."}}) {
    fmt::format_to(std::back_inserter(out),
                   "# HELP gpufs_stall_{0} {1}\n# TYPE gpufs_stall_{0} gauge\n", key, help);
    for (const char* which : {kCurrent, kLast}) {
      if (!stall[which].is_object()) continue;
      fmt::format_to(std::back_inserter(out), "gpufs_stall_{}{{epoch=\"{}\"}} {}\n", key, which,
                     stall[which][key].dump());
    }
  }
}

}  // namespace

std::string MetricsText(const Filesystem& fs) {
  const nlohmann::json stats = StatsOf(fs);
  std::string out;
  auto metric = [&out](std::string_view name, std::string_view type, std::string_view help,
                       const nlohmann::json& value) {
    if (!value.is_number()) return;
    fmt::format_to(std::back_inserter(out), "# HELP gpufs_{0} {1}\n# TYPE gpufs_{0} {2}\n", name,
                   help, type);
    if (value.is_number_float()) {
      fmt::format_to(std::back_inserter(out), "gpufs_{} {}\n", name, value.get<double>());
    } else {
      fmt::format_to(std::back_inserter(out), "gpufs_{} {}\n", name, value.get<uint64_t>());
    }
  };
  metric("dataset_files", "gauge", "Files in the mounted dataset.", stats["files"]);
  metric("dataset_bytes", "gauge", "Bytes in the mounted dataset.", stats["bytes"]);
  metric("kernel_inodes", "gauge", "Inode references the kernel holds.", stats["inodes"]);
  metric("reads_total", "counter", "Read requests answered.", stats["served"]["reads"]);
  metric("served_bytes_total", "counter", "Bytes returned by reads.", stats["served"]["bytes"]);
  metric("served_files_total", "counter", "Files read to their end.", stats["served"]["files"]);
  // A const json's operator[] asserts the key is there; a source reports only the
  // counters it keeps (a local one has no retries), so absent keys read as null.
  auto at = [](const nlohmann::json& j, const char* key) {
    return j.is_object() && j.contains(key) ? j[key] : nlohmann::json();
  };
  const nlohmann::json& io = stats["io"];
  metric("source_requests_total", "counter", "Requests sent to the blob source, retries included.",
         at(io, source_stat::kRequests));
  metric("source_retries_total", "counter", "Requests to the blob source that were retried.",
         at(io, source_stat::kRetries));
  metric("source_errors_total", "counter", "Blob reads that failed in the end.",
         at(io, source_stat::kErrors));
  metric("source_bytes_total", "counter", "Bytes read from the blob source.",
         at(io, source_stat::kBytes));
  metric("source_in_flight", "gauge", "Blob source requests in flight.",
         at(io, source_stat::kInFlight));
  metric("source_latency_p50_ms", "gauge", "Median latency of answered source requests.",
         at(io, source_stat::kLatencyP50));
  metric("source_latency_p99_ms", "gauge", "99th percentile latency of answered source requests.",
         at(io, source_stat::kLatencyP99));
  metric("source_peer_fallbacks_total", "counter",
         "Blocks read from the store after every peer cache failed them.",
         at(io, source_stat::kPeerFallbacks));
  metric("source_peer_mismatches_total", "counter",
         "Blocks a peer cache sent whose bytes did not match the index's SHA-256.",
         at(io, source_stat::kPeerMismatches));
  PeerMetrics(io, out);
  CredentialMetrics(io, out);
  const nlohmann::json& c = stats["cache"];
  if (c.is_null()) return out;
  for (const char* key :
       {"hits", "misses", "shared_waits", "member_reads", "groups_loaded", "evictions",
        "prefetch_issued", "prefetch_used", "prefetch_wasted", "io_errors", "demand_reads"}) {
    metric(fmt::format("cache_{}_total", key), "counter", "Group cache counter.", c[key]);
  }
  metric("cache_disk_bytes_total", "counter", "Bytes read from the blobs.", c["bytes_from_disk"]);
  metric("cache_budget_bytes", "gauge", "Pinned cache budget.", c["budget_bytes"]);
  metric("cache_bytes", "gauge", "Pinned cache bytes in use.", c["cached_bytes"]);
  metric("cache_groups", "gauge", "Groups held in the pinned cache.", c["cached_groups"]);
  metric("cache_prefetch_in_flight", "gauge", "Prefetch loads in flight.", c["prefetch_in_flight"]);
  metric("cache_prefetch_window", "gauge",
         "Prefetch reads the source may have in flight, shrunk while demand reads wait "
         "behind them.",
         c["prefetch_window"]);
  metric("cache_read_amplification", "gauge", "Disk bytes per byte served.",
         c["read_amplification"]);
  metric("epoch", "gauge", "Training epoch detected from the access stream.", c["epoch"]);
  StallMetrics(at(c, stall_stat::kStall), out);
  metric("epoch_served_files", "gauge", "Files served in the current epoch.",
         c["epoch_files_served"]);
  if (!c.contains("tier")) return out;
  const nlohmann::json& t = c["tier"];
  using namespace tier_stat;
  for (const auto& [key, type, help] :
       {std::tuple{kHits, "counter", "Groups read back whole from the disk tier."},
        {kSliceHits, "counter", "Files read back alone from the disk tier."},
        {kMisses, "counter", "Disk tier reads that found no copy."},
        {kDamaged, "counter", "Disk tier copies found damaged and deleted."},
        {kHashMismatches, "counter",
         "Disk tier copies deleted because they did not match the index's SHA-256."},
        {kReadBytes, "counter", "Bytes read from the disk tier."},
        {kWrites, "counter", "Groups written to the disk tier."},
        {kWriteBytes, "counter", "Bytes written to the disk tier."},
        {kSkipped, "counter", "Groups not kept on disk for want of room."},
        {kWriteErrors, "counter", "Disk tier writes that failed."},
        {kEvictions, "counter", "Disk tier copies deleted to make room."},
        {kFills, "counter", "Groups fetched to the disk tier alone."},
        {kUsed, "gauge", "Bytes in the disk tier folder, all daemons sharing it."},
        {kBound, "gauge", "Bound on the disk tier folder; 0: bounded by free space."}}) {
    const bool counter = std::string_view(type) == "counter";
    metric(fmt::format("disk_tier_{}{}", key, counter ? "_total" : ""), type, help, at(t, key));
  }
  return out;
}

}  // namespace gpufs
