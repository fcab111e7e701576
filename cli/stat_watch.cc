#include "cli/stat_watch.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "cache/account/stall_account.h"
#include "cache/cache_stat.h"
#include "cache/disk_tier.h"
#include "cli/stat_source.h"
#include "dataset/printable.h"
#include "source/blob_source.h"
#include "source/remote/address/peers.h"

namespace gpufs {
namespace {

constexpr int kBarWidth = 30;
std::atomic<bool> interrupted{false};

// The counters a frame needs, as differences and totals.
struct Rates {
  double files_s = 0, served_mb_s = 0, disk_mb_s = 0, requests_s = 0;
  double tier_read_mb_s = 0, tier_write_mb_s = 0;  // the disk tier's
  double peer_mb_s = 0, store_mb_s = 0;            // an object store's, with --peers
  double hit_now = -1, hit_total = -1;             // -1: no reads yet
  double amp_now = 0, amp_total = 0;
  uint64_t files_total = 0, bytes_total = 0, disk_total = 0;
};

uint64_t At(const nlohmann::json& j, std::initializer_list<const char*> keys) {
  const nlohmann::json* at = &j;
  for (const char* key : keys) {
    if (!at->is_object() || !at->contains(key)) return 0;
    at = &(*at)[key];
  }
  return at->is_number() ? at->get<uint64_t>() : 0;
}

double Real(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

// A figure in milliseconds, or "-" where the source does not measure it (a local folder's
// reads are not timed): never a 0.0 that reads as "instant".
std::string MsOrDash(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number()
             ? fmt::format("{:.1f}", j[key].get<double>())
             : std::string("-");
}

// The blob source: where cache misses go (a local folder, a store, an HTTP server).
std::string SourceLine(const nlohmann::json& io, const Rates& r) {
  using namespace source_stat;
  return fmt::format("{:<10}{:>10} req/s   retries {}  errors {}  latency p50 {} p99 {} ms",
                     io.value(kKind, std::string("?")), fmt::format("{:.0f}", r.requests_s),
                     At(io, {kRetries}), At(io, {kErrors}), MsOrDash(io, kLatencyP50),
                     MsOrDash(io, kLatencyP99));
}

// With --peers: where the bytes come from, and the peers that are skipped.
std::vector<std::string> PeerLines(const nlohmann::json& io, const Rates& r) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kPeers)) return {};
  const nlohmann::json& peers = io[kPeers];
  std::vector<std::string> down;
  for (const nlohmann::json& p : peers) {
    if (!p.value(remote::peer_stat::kUp, true)) {
      down.push_back(p.value(remote::peer_stat::kUrl, std::string("?")));
    }
  }
  std::vector<std::string> lines = {fmt::format(
      "{:<10}{} of {} up   peers {:.1f} MB/s  store {:.1f} MB/s  failed {}  fallback {}", "peers",
      peers.size() - down.size(), peers.size(), r.peer_mb_s, r.store_mb_s, At(io, {kPeerFailures}),
      At(io, {kPeerFallbacks}))};
  for (const std::string& url : down) lines.push_back(fmt::format("{:<10}skipped: {}", "", url));
  return lines;
}

// A signed store's keys: where from, when they expire, how their refreshes went. The
// frame cuts lines at 80 columns, so the source comes last.
std::string CredentialLine(const nlohmann::json& io) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kCredentials)) return {};
  const nlohmann::json& c = io[kCredentials];
  const nlohmann::json expires = c.value(kCredentialExpiresIn, nlohmann::json());
  return fmt::format("{:<10}expire {}  refreshed {}  failed {}  {}", "keys",
                     expires.is_number() ? fmt::format("in {} s", expires.dump()) : "never",
                     At(c, {kCredentialRefreshes}), At(c, {kCredentialRefreshFailures}),
                     c.value(kCredentialSource, ""));
}

double Ratio(double part, double whole) { return whole > 0 ? part / whole : -1; }

// The disk tier's room: its bound, or (bounded by free space) what it uses.
double TierRoom(const nlohmann::json& t) {
  const auto bound = static_cast<double>(At(t, {tier_stat::kBound}));
  return bound > 0 ? bound : static_cast<double>(At(t, {tier_stat::kUsed}));
}

Rates RatesOf(const nlohmann::json& a, const nlohmann::json& b, double dt) {
  Rates r;
  auto delta = [&](std::initializer_list<const char*> keys) {
    return static_cast<double>(At(b, keys) - std::min(At(a, keys), At(b, keys)));
  };
  const double per_s = dt > 0 ? 1.0 / dt : 0;
  r.files_s = delta({"served", "files"}) * per_s;
  r.served_mb_s = delta({"served", "bytes"}) * per_s / 1e6;
  r.disk_mb_s = delta({"cache", cache_stat::kBytesFromDisk}) * per_s / 1e6;
  r.requests_s = delta({"io", source_stat::kRequests}) * per_s;
  r.peer_mb_s = delta({"io", source_stat::kPeerBytes}) * per_s / 1e6;
  r.store_mb_s = delta({"io", source_stat::kBytes}) * per_s / 1e6;
  r.tier_read_mb_s = delta({"cache", "tier", tier_stat::kReadBytes}) * per_s / 1e6;
  r.tier_write_mb_s = delta({"cache", "tier", tier_stat::kWriteBytes}) * per_s / 1e6;
  const double hits = delta({"cache", cache_stat::kHits});
  const double asked =
      hits + delta({"cache", cache_stat::kMisses}) + delta({"cache", cache_stat::kMemberReads});
  r.hit_now = Ratio(hits, asked);
  const auto total_hits = static_cast<double>(At(b, {"cache", cache_stat::kHits}));
  r.hit_total = Ratio(total_hits, total_hits + At(b, {"cache", cache_stat::kMisses}) +
                                      At(b, {"cache", cache_stat::kMemberReads}));
  r.amp_now = std::max(0.0, Ratio(delta({"cache", cache_stat::kBytesFromDisk}),
                                  delta({"cache", cache_stat::kBytesServed})));
  r.amp_total = std::max(0.0, Ratio(At(b, {"cache", cache_stat::kBytesFromDisk}),
                                    At(b, {"cache", cache_stat::kBytesServed})));
  r.files_total = At(b, {"served", "files"});
  r.bytes_total = At(b, {"served", "bytes"});
  r.disk_total = At(b, {"cache", cache_stat::kBytesFromDisk});
  return r;
}

std::string Grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string Bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  while (bytes >= 1024 && unit + 1 < std::size(kUnits)) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", bytes, kUnits[unit]);
}

std::string Bar(double fraction) {
  const int filled = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * kBarWidth + 0.5);
  std::string bar = "[";
  bar.append(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kBarWidth - filled), '.');
  return bar + "]";
}

std::string Pct(double ratio) { return ratio < 0 ? "  -  " : fmt::format("{:.1f}%", 100 * ratio); }

void OnSignal(int) { interrupted.store(true); }

// Sleeps up to `seconds`, waking early on SIGINT/SIGTERM.
void Pause(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!interrupted.load() && std::chrono::steady_clock::now() < until) {
    poll(nullptr, 0, 50);
  }
}

// "local io_uring", "s3", ...: what serves the misses.
std::string SourceOf(const nlohmann::json& now) {
  const nlohmann::json& io = now.contains("io") ? now["io"] : nlohmann::json();
  if (!io.is_object()) return "?";
  const std::string kind = io.value(source_stat::kKind, std::string("?"));
  return io.contains("engine") ? kind + " " + io.value("engine", std::string()) : kind;
}

// The stall account (stall_account.h): how much of this epoch readers waited on
// storage, and on what.
std::vector<std::string> StallLines(const nlohmann::json& c) {
  using namespace stall_stat;
  if (!c.is_object() || !c.contains(kStall)) return {};
  const nlohmann::json& now = c[kStall][kCurrent];
  const nlohmann::json& last = c[kStall][kLast];
  std::vector<std::string> lines = {fmt::format(
      "{:<10}{} waiting: {:.1f} s of {:.1f} s   demand {:.1f} MB/s   last epoch {}", "stall",
      Pct(Real(now, kStallFraction)), Real(now, kStalledS), Real(now, kWallS),
      Real(now, kDemandMbPerS), last.is_object() ? Pct(Real(last, kStallFraction)) : "-")};
  std::string from;
  for (const char* tier : kServedFromNames) {
    const nlohmann::json& t = now[kFrom][tier];
    from += fmt::format("{} {}{}  ", tier, Grouped(At(t, {kReads})),
                        Real(t, kWaitS) > 0 ? fmt::format(" ({:.1f} s)", Real(t, kWaitS)) : "");
  }
  lines.push_back(fmt::format("{:<10}{}", "reads", from));
  return lines;
}

// The stall account's fields of a -w line: the epoch in progress, the last, and each
// tier's reads and waits in the epoch in progress.
std::string StallFields(const nlohmann::json& c) {
  using namespace stall_stat;
  if (!c.is_object() || !c.contains(kStall)) return {};
  const nlohmann::json& now = c[kStall][kCurrent];
  const nlohmann::json& last = c[kStall][kLast];
  std::string f = fmt::format(
      " {0}={1:.4f} {2}={3:.1f} {4}_{0}={5} {6}={7:.4f}", kStallFraction, Real(now, kStallFraction),
      kDemandMbPerS, Real(now, kDemandMbPerS), kLast,
      last.is_object() ? fmt::format("{:.4f}", Real(last, kStallFraction)) : std::string("-"),
      kHitRatio, Real(now, kHitRatio));
  for (const char* tier : kServedFromNames) {
    const nlohmann::json& t = now[kFrom][tier];
    f += fmt::format(" {0}_{1}={2} {0}_{3}={4:.3f}", tier, kReads, At(t, {kReads}), kWaitS,
                     Real(t, kWaitS));
  }
  return f;
}

// The cache's lines: what it fetched, its hit ratios, prefetch, its fill and the disk tier.
std::vector<std::string> CacheLines(const nlohmann::json& c, const Rates& r) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("{:<10}{:>27} MB/s   total {}, read amp {:.2f}x", "fetched",
                              fmt::format("{:.1f}", r.disk_mb_s),
                              Bytes(static_cast<double>(r.disk_total)), r.amp_total));
  // The hit ratio is the stall account's, as --advise, /metrics and gpufs-emulate give it:
  // the share of this epoch's bytes that did not come from the source. Reads that found
  // their bytes in memory, prefetched there this epoch or not, are the other figure.
  const nlohmann::json& this_epoch =
      c.contains(stall_stat::kStall) ? c[stall_stat::kStall][stall_stat::kCurrent] : nullptr;
  const bool served = this_epoch.is_object() && Real(this_epoch, stall_stat::kBytesServed) > 0;
  lines.push_back(fmt::format(
      "{:<10}{:>6} this epoch (bytes not from the source)   in memory {:>6} now "
      "{:>6} overall",
      "hit ratio", served ? Pct(std::max(0.0, Real(this_epoch, stall_stat::kHitRatio))) : "-",
      Pct(r.hit_now), Pct(r.hit_total)));
  const uint64_t issued = At(c, {cache_stat::kPrefetchIssued}),
                 wasted = At(c, {cache_stat::kPrefetchWasted});
  lines.push_back(fmt::format(
      "{:<10}{} in flight   {} used   {} wasted ({} of issued)   {} demand reads", "prefetch",
      At(c, {cache_stat::kPrefetchInFlight}), Grouped(At(c, {cache_stat::kPrefetchUsed})),
      Grouped(wasted), Pct(Ratio(static_cast<double>(wasted), issued)),
      Grouped(At(c, {cache_stat::kDemandReads}))));
  const double budget = static_cast<double>(At(c, {cache_stat::kBudget}));
  const double cached = static_cast<double>(At(c, {cache_stat::kCachedBytes}));
  lines.push_back(fmt::format("{:<10}{} {} / {}, {} groups", "cache", Bar(Ratio(cached, budget)),
                              Bytes(cached), Bytes(budget),
                              Grouped(At(c, {cache_stat::kCachedGroups}))));
  if (c.contains("tier")) {
    using namespace tier_stat;
    const nlohmann::json& t = c["tier"];
    const auto used = static_cast<double>(At(t, {kUsed}));
    lines.push_back(fmt::format("{:<10}{} {} / {}{}", "disk tier", Bar(Ratio(used, TierRoom(t))),
                                Bytes(used),
                                At(t, {kBound}) ? Bytes(TierRoom(t)) : std::string("free space"),
                                t.value(kEnabled, true) ? "" : "  OFF (see the log)"));
    lines.push_back(
        fmt::format("{:<10}read {:.1f} MB/s  write {:.1f} MB/s  hits {} + {} files  fills {}", "",
                    r.tier_read_mb_s, r.tier_write_mb_s, Grouped(At(t, {kHits})),
                    Grouped(At(t, {kSliceHits})), Grouped(At(t, {kFills}))));
    lines.push_back(fmt::format("{:<10}evicted {}  damaged {}  not kept {}  write errors {}", "",
                                Grouped(At(t, {kEvictions})), At(t, {kDamaged}),
                                Grouped(At(t, {kSkipped})), At(t, {kWriteErrors})));
  }
  return lines;
}

}  // namespace

std::string WatchFrame(const std::string& mount, const nlohmann::json& previous,
                       const nlohmann::json& now, double dt_s) {
  const Rates r = RatesOf(previous, now, dt_s);
  const nlohmann::json& c = now.contains("cache") ? now["cache"] : nlohmann::json();
  std::string f;
  auto line = [&f](const std::string& text) { f += text.substr(0, 80) + "\n"; };
  line(fmt::format("gpufs-stat -w {}   gpufsd {}   {}   {:%H:%M:%S}", mount, At(now, {"pid"}),
                   (c.is_null() ? "no cache" : c.value("policy", "")) + ", " + SourceOf(now),
                   fmt::localtime(std::time(nullptr))));
  line(fmt::format("{:<10}{:>10} files/s {:>9} MB/s   total {} files, {}", "served",
                   fmt::format("{:.0f}", r.files_s), fmt::format("{:.1f}", r.served_mb_s),
                   Grouped(r.files_total), Bytes(static_cast<double>(r.bytes_total))));
  line(SourceLine(now.contains("io") ? now["io"] : nlohmann::json(), r));
  for (const std::string& text : PeerLines(now.contains("io") ? now["io"] : nlohmann::json(), r)) {
    line(text);
  }
  if (std::string keys = CredentialLine(now.contains("io") ? now["io"] : nlohmann::json());
      !keys.empty()) {
    line(keys);
  }
  if (c.is_null()) {
    line("cache     none (mounted with --cache-size 0): reads go straight to the blobs");
    return f;
  }
  for (const std::string& text : CacheLines(c, r)) line(text);
  if (now.contains("gpu") && now["gpu"].value("registered", false)) {
    line(fmt::format("{:<10}{}: cache registered for DMA ({}, {:.0f} ms)", "gpu",
                     now["gpu"].value("device", ""),
                     Bytes(static_cast<double>(At(now, {"gpu", "registered_bytes"}))),
                     now["gpu"].value("register_ms", 0.0)));
  }
  for (const std::string& text : StallLines(c)) line(text);
  // The stall account's epoch (one definition for every view); none without a cache.
  const uint64_t epoch = At(c, {cache_stat::kEpoch});
  const uint64_t files = At(now, {"files"}), done = At(c, {cache_stat::kEpochFilesServed});
  if (epoch != 0) {
    line(fmt::format("{:<10}{} {} / {} files", fmt::format("epoch {}", epoch),
                     Bar(Ratio(static_cast<double>(done), static_cast<double>(files))),
                     Grouped(done), Grouped(files)));
  }
  return f;
}

namespace {

// The disk tier's fields of a -w line, when the mount has one.
std::string TierFields(const nlohmann::json& c, const Rates& r) {
  if (!c.is_object() || !c.contains("tier")) return {};
  using namespace tier_stat;
  const nlohmann::json& t = c["tier"];
  return fmt::format(
      " tier_read_mb_per_s={:.1f} tier_write_mb_per_s={:.1f} tier_used_bytes={} "
      "tier_fill={:.3f} tier_hits={} tier_slice_hits={} tier_fills={} tier_evictions={} "
      "tier_damaged={} tier_write_errors={}",
      r.tier_read_mb_s, r.tier_write_mb_s, At(t, {kUsed}),
      std::max(0.0, Ratio(static_cast<double>(At(t, {kUsed})), TierRoom(t))), At(t, {kHits}),
      At(t, {kSliceHits}), At(t, {kFills}), At(t, {kEvictions}), At(t, {kDamaged}),
      At(t, {kWriteErrors}));
}

// The peers' fields of a -w line, when the mount reads through peers.
std::string PeerFields(const nlohmann::json& io, const Rates& r) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kPeers)) return {};
  size_t up = 0;
  for (const nlohmann::json& p : io[kPeers]) up += p.value("up", true) ? 1 : 0;
  return fmt::format(
      " peers={} peers_up={} peer_mb_per_s={:.1f} store_mb_per_s={:.1f} peer_failures={} "
      "peer_fallbacks={} peer_mismatches={}",
      io[kPeers].size(), up, r.peer_mb_s, r.store_mb_s, At(io, {kPeerFailures}),
      At(io, {kPeerFallbacks}), At(io, {kPeerMismatches}));
}

// A signed store's credentials in a -w line: where they come from, when they expire
// ("-": never) and how their refreshes went.
std::string CredentialFields(const nlohmann::json& io) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kCredentials)) return {};
  const nlohmann::json& c = io[kCredentials];
  const nlohmann::json expires = c.value(kCredentialExpiresIn, nlohmann::json());
  return fmt::format(" {0}_{1}={2} {0}_{3}={4} {0}_{5}={6} {0}_{7}={8}", kCredentials,
                     kCredentialSource, nlohmann::json(c.value(kCredentialSource, "")).dump(),
                     kCredentialExpiresIn, expires.is_number() ? expires.dump() : "-",
                     kCredentialRefreshes, At(c, {kCredentialRefreshes}),
                     kCredentialRefreshFailures, At(c, {kCredentialRefreshFailures}));
}

}  // namespace

std::string WatchLine(const nlohmann::json& previous, const nlohmann::json& now, double dt_s) {
  const Rates r = RatesOf(previous, now, dt_s);
  const nlohmann::json& c = now.contains("cache") ? now["cache"] : nlohmann::json();
  const auto files = static_cast<double>(At(now, {"files"}));
  const nlohmann::json& io = now.contains("io") ? now["io"] : nlohmann::json();
  return fmt::format(
             "time={:%H:%M:%S} files_per_s={:.0f} served_mb_per_s={:.1f} disk_mb_per_s={:.1f} "
             "in_memory_ratio={} read_amplification={:.2f} prefetch_in_flight={} "
             "prefetch_used={} prefetch_wasted={} cache_fill={:.3f} epoch={} epoch_progress={:.3f} "
             "source_requests_per_s={:.0f} source_retries={} source_errors={} "
             "source_latency_ms_p50={} source_latency_ms_p99={}",
             fmt::localtime(std::time(nullptr)), r.files_s, r.served_mb_s, r.disk_mb_s,
             r.hit_now < 0 ? std::string("-") : fmt::format("{:.3f}", r.hit_now), r.amp_total,
             At(c, {cache_stat::kPrefetchInFlight}), At(c, {cache_stat::kPrefetchUsed}),
             At(c, {cache_stat::kPrefetchWasted}),
             std::max(0.0, Ratio(static_cast<double>(At(c, {cache_stat::kCachedBytes})),
                                 static_cast<double>(At(c, {cache_stat::kBudget})))),
             At(c, {cache_stat::kEpoch}),
             std::max(0.0,
                      Ratio(static_cast<double>(At(c, {cache_stat::kEpochFilesServed})), files)),
             r.requests_s, At(io, {source_stat::kRetries}), At(io, {source_stat::kErrors}),
             MsOrDash(io, source_stat::kLatencyP50), MsOrDash(io, source_stat::kLatencyP99)) +
         TierFields(c, r) + StallFields(c) + PeerFields(io, r) + CredentialFields(io);
}

int RunWatch(const std::string& path, const WatchOptions& options) {
  const std::string absolute = std::filesystem::absolute(path).lexically_normal().string();
  auto mount = MountOf(absolute);
  if (!mount)
    return fmt::print(stderr, "gpufs-stat: {}\n", PrintableLine(mount.error().message)), 1;
  if (!mount->is_gpufs()) {
    fmt::print(stderr, "gpufs-stat: {} is not on a gpufs mount; -w watches a gpufsd\n", path);
    return 1;
  }
  auto client = DaemonClient::Connect(*mount, options.timeout_s);
  if (!client) {
    fmt::print(stderr, "gpufs-stat: {}\n", PrintableLine(client.error().message));
    std::fflush(stderr);
    if (client.error().code == ETIMEDOUT) _exit(1);  // see gpufs_stat.cc
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  auto previous = client->Stats();
  auto then = std::chrono::steady_clock::now();
  if (options.terminal) fmt::print("\x1b[?25l\x1b[2J");  // hide the cursor, clear once
  int status = 0;
  for (unsigned shown = 0; previous && (options.count == 0 || shown < options.count); ++shown) {
    Pause(options.interval_s);
    if (interrupted.load()) break;
    auto now = client->Stats();
    if (!now) {
      previous = now;
      break;
    }
    const auto when = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(when - then).count();
    if (options.terminal) {
      std::string frame = WatchFrame(mount->path, *previous, *now, dt);
      std::string drawn = "\x1b[H";  // home, then each line cleared past its end
      for (size_t at = 0, eol; (eol = frame.find('\n', at)) != std::string::npos; at = eol + 1) {
        drawn += frame.substr(at, eol - at) + "\x1b[K\n";
      }
      fmt::print("{}\x1b[J", drawn);
    } else {
      fmt::print("{}\n", WatchLine(*previous, *now, dt));
    }
    std::fflush(stdout);
    previous = std::move(now);
    then = when;
  }
  if (options.terminal) fmt::print("\x1b[?25h");
  if (!previous) {
    fmt::print(stderr, "gpufs-stat: the gpufsd of {} is gone: {}\n", mount->path,
               PrintableLine(previous.error().message));
    status = 1;
  }
  return status;
}

}  // namespace gpufs
