#include "cli/stat/stat_watch.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "base/sizes.h"
#include "cache/account/stall_account.h"
#include "cache/cache_stat.h"
#include "cache/tier/disk_tier.h"
#include "cli/stat/stat_scan.h"
#include "cli/stat/stat_source.h"
#include "cli/stat/stat_watch_fields.h"
#include "dataset/printable.h"
#include "source/blob_source.h"
#include "source/remote/address/peers.h"

namespace gpufs {
namespace {

using watch::At;
using watch::MsOrDash;
using watch::Rates;
using watch::RatesOf;
using watch::Ratio;
using watch::Real;
using watch::TierRoom;

constexpr int kBarWidth = 30;
// While no read reaches gpufsd, the page cache is measured again after this long: a walk of
// every file the kernel knows takes seconds at ImageNet scale.
constexpr auto kRemeasure = std::chrono::seconds(10);
std::atomic<bool> interrupted{false};

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

std::string Grouped(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string Bytes(double bytes) {
  return FormatSize(static_cast<uint64_t>(bytes), {.largest = SizeScale::kTera, .trim = false});
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
  const nlohmann::json& now = watch::Child(c, {kStall, kCurrent});
  const nlohmann::json& last = watch::Child(c, {kStall, kLast});
  std::vector<std::string> lines = {fmt::format(
      "{:<10}{} waiting: {:.1f} s of {:.1f} s   demand {:.1f} MB/s   last epoch {}", "stall",
      Pct(Real(now, kStallFraction)), Real(now, kStalledS), Real(now, kWallS),
      Real(now, kDemandMbPerS), last.is_object() ? Pct(Real(last, kStallFraction)) : "-")};
  std::string from;
  for (const char* tier : kServedFromNames) {
    const nlohmann::json& t = watch::Child(now, {kFrom, tier});
    from += fmt::format("{} {}{}  ", tier, Grouped(At(t, {kReads})),
                        Real(t, kWaitS) > 0 ? fmt::format(" ({:.1f} s)", Real(t, kWaitS)) : "");
  }
  lines.push_back(fmt::format("{:<10}{}", "reads", from));
  return lines;
}

// A compressed archive's decoding: how fast, how many cores it keeps busy, and its failures.
std::string DecodeLine(const nlohmann::json& io, const Rates& r) {
  using namespace source_stat;
  if (!io.is_object() || !io.contains(kDecodedGroups)) return {};
  return fmt::format("{:<10}{:>27} MB/s   {:.2f} cores  groups {}  errors {}", "decoded",
                     fmt::format("{:.1f}", r.decoded_mb_s), r.decode_cores,
                     Grouped(At(io, {kDecodedGroups})), At(io, {kDecodeErrors}));
}

// The cache's lines: what it fetched, its hit ratios, prefetch, its fill and the disk tier.
std::vector<std::string> CacheLines(const nlohmann::json& c, const Rates& r) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("{:<10}{:>27} MB/s   total {}, read amp {:.2f}x", "fetched",
                              fmt::format("{:.1f}", r.source_mb_s),
                              Bytes(static_cast<double>(r.source_total)), r.amp_total));
  // The hit ratio is the stall account's, as --advise, /metrics and gpufs-emulate give it:
  // the share of this epoch's bytes that did not come from the source. Reads that found
  // their bytes in memory, prefetched there this epoch or not, are the other figure.
  const nlohmann::json& this_epoch = watch::Child(c, {stall_stat::kStall, stall_stat::kCurrent});
  const bool measured = watch::Child(this_epoch, {stall_stat::kHitRatio}).is_number();
  lines.push_back(
      fmt::format("{:<10}{:>6} this epoch (bytes not from the source)   in memory {:>6} now "
                  "{:>6} overall",
                  "hit ratio", measured ? Pct(Real(this_epoch, stall_stat::kHitRatio)) : "  -  ",
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

// Reads the kernel's page cache answers never reach gpufsd: an epoch it serves shows as
// nothing served. Said when no read reached gpufsd and the page cache holds the files.
std::vector<std::string> KernelLines(const KernelView& kernel) {
  if (!kernel.page_cache_ratio || *kernel.page_cache_ratio <= 0) return {};
  return {
      fmt::format("{:<10}the kernel's page cache is serving (reads do not reach gpufsd)", "kernel"),
      fmt::format("{:<10}it holds {} of the dataset's pages; no read reached gpufsd", "",
                  Pct(*kernel.page_cache_ratio))};
}

}  // namespace

std::string WatchFrame(const std::string& mount, const nlohmann::json& previous,
                       const nlohmann::json& now, double dt_s, const KernelView& kernel) {
  const Rates r = RatesOf(previous, now, dt_s);
  const nlohmann::json& c = now.contains("cache") ? now["cache"] : nlohmann::json();
  std::string f;
  auto line = [&f](const std::string& text) { f += text.substr(0, 80) + "\n"; };
  line(fmt::format("gpufs-stat -w {}   gpufsd {}   {}   {:%H:%M:%S}", mount, At(now, {"pid"}),
                   (c.is_null() ? "no cache" : c.value("policy", "")) + ", " + SourceOf(now),
                   fmt::localtime(std::time(nullptr))));
  line(fmt::format("{:<10}{:>10} files/s {:>9} MB/s   total {} files, {}   via {}", "served",
                   fmt::format("{:.0f}", r.files_s), fmt::format("{:.1f}", r.served_mb_s),
                   Grouped(r.files_total), Bytes(static_cast<double>(r.bytes_total)),
                   watch::TransportOf(now)));
  for (const std::string& text : KernelLines(kernel)) line(text);
  line(SourceLine(now.contains("io") ? now["io"] : nlohmann::json(), r));
  if (std::string decoded = DecodeLine(now.contains("io") ? now["io"] : nlohmann::json(), r);
      !decoded.empty()) {
    line(decoded);
  }
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

// The kernel's share of the mount, measured when no read reached gpufsd in an interval
// (again after kRemeasure while none does); not measured while reads reach it.
class PageCacheProbe {
 public:
  PageCacheProbe(std::string mount, double timeout_s) : mount_(std::move(mount)) {
    options_.timeout_s = timeout_s;
  }
  KernelView Look(const nlohmann::json& previous, const nlohmann::json& now) {
    const auto reads = [](const nlohmann::json& j) { return At(j, {"served", "reads"}); };
    if (reads(now) != reads(previous)) {
      measured_ = false;
      return {};
    }
    const auto t = std::chrono::steady_clock::now();
    if (!measured_ || t - at_ >= kRemeasure) {
      auto share = KernelShare(mount_, options_);
      share_ = share ? std::optional<double>(*share) : std::nullopt;
      measured_ = true;
      at_ = t;
    }
    return {share_};
  }

 private:
  const std::string mount_;
  StatOptions options_;
  bool measured_ = false;
  std::optional<double> share_;
  std::chrono::steady_clock::time_point at_;
};

// One refresh: a frame drawn over the last on a terminal, else a line.
void Show(const WatchOptions& options, const std::string& mount, const nlohmann::json& previous,
          const nlohmann::json& now, double dt, const KernelView& kernel) {
  if (options.json) {
    fmt::print("{}\n", WatchJson(previous, now, dt, kernel));
  } else if (options.terminal) {
    std::string frame = WatchFrame(mount, previous, now, dt, kernel);
    std::string drawn = "\x1b[H";  // home, then each line cleared past its end
    for (size_t at = 0, eol; (eol = frame.find('\n', at)) != std::string::npos; at = eol + 1) {
      drawn += frame.substr(at, eol - at) + "\x1b[K\n";
    }
    fmt::print("{}\x1b[J", drawn);
  } else {
    fmt::print("{}\n", WatchLine(previous, now, dt, kernel));
  }
  std::fflush(stdout);
}

}  // namespace

int RunWatch(const std::string& path, const WatchOptions& options) {
  auto connected = ConnectToMountOf(path, "-w watches a gpufsd", options.timeout_s);
  if (!connected) {
    fmt::print(stderr, "gpufs-stat: {}\n", PrintableLine(connected.error().message));
    std::fflush(stderr);
    if (connected.error().code == ETIMEDOUT) _exit(1);  // see gpufs_stat.cc
    return 1;
  }
  const MountPoint* mount = &connected->mount;
  const DaemonClient* client = &connected->client;
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  PageCacheProbe probe(mount->path, options.timeout_s);
  auto previous = client->Stats();
  auto then = std::chrono::steady_clock::now();
  if (options.terminal) fmt::print("\x1b[?25l\x1b[2J");  // hide the cursor, clear once
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
    Show(options, mount->path, *previous, *now, dt, probe.Look(*previous, *now));
    previous = std::move(now);
    then = when;
  }
  if (options.terminal) fmt::print("\x1b[?25h");
  if (!previous) {
    fmt::print(stderr, "gpufs-stat: the gpufsd of {} is gone: {}\n", mount->path,
               PrintableLine(previous.error().message));
    return 1;
  }
  return 0;
}

}  // namespace gpufs
