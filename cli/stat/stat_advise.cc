#include "cli/stat/stat_advise.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <vector>

#include "base/file_io.h"
#include "base/sizes.h"
#include "cache/account/advice.h"
#include "cache/miss_reads.h"
#include "cache/policy/policy.h"
#include "cli/stat/stat_scan.h"
#include "cli/stat/stat_source.h"
#include "cli/stat/stat_watch_fields.h"
#include "dataset/printable.h"

namespace gpufs {
namespace {

std::string MiB(double bytes) {
  return FormatSize(static_cast<uint64_t>(bytes),
                    {.unit = SizeScale::kMega, .decimals = 0, .separator = ""});
}

double Num(const nlohmann::json& j, const char* key) {
  const double x =
      j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
  return std::abs(x) < 5e-3 ? 0.0 : x;  // no "-0.00"
}

// A ratio, or "-" where it was not measured (nothing served).
std::string RatioOf(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? fmt::format("{:.2f}", Num(j, key))
                                                                : "-";
}

// Where each read of the epoch came from, and how long its readers waited there.
std::string ServedLine(const nlohmann::json& measured) {
  using namespace stall_stat;
  std::string line;
  for (const char* tier : kServedFromNames) {
    const nlohmann::json& t = measured[kFrom][tier];
    line += fmt::format("{} {:.0f}{}   ", tier, Num(t, kReads),
                        Num(t, kWaitS) > 0 ? fmt::format(" ({:.1f} s)", Num(t, kWaitS)) : "");
  }
  return line;
}

std::string PointRow(const nlohmann::json& p, const nlohmann::json& chosen) {
  using namespace advice_stat;
  const bool is_chosen = chosen.is_object() && p[kPolicy] == chosen[kPolicy] &&
                         p[kCacheBytes] == chosen[kCacheBytes] &&
                         p[kTierBytes] == chosen[kTierBytes];
  return fmt::format("  {} {:>9} {:>9}  {:<13}{:>9} {:>12} {:>9.1f} {:>7.1f}%{}{}\n",
                     is_chosen ? '*' : ' ', MiB(Num(p, kCacheBytes)),
                     Num(p, kTierBytes) > 0 ? MiB(Num(p, kTierBytes)) : "-",
                     p[kPolicy].get<std::string>(), RatioOf(p, kHitRatio),
                     MiB(Num(p, kSourceBytes)), Num(p, kEpochS), 100 * Num(p, kStallFraction),
                     p.value(kBound, false) ? " <=" : "", is_chosen ? "   <- advice" : "");
}

// Today's policy's points (and the tier's), smallest first: the curve in a table.
std::string PointTable(const nlohmann::json& a) {
  using namespace advice_stat;
  std::string table =
      fmt::format("  {} {:>9} {:>9}  {:<13}{:>9} {:>12} {:>9} {:>8}\n", ' ', "cache", "disk tier",
                  "policy", "hit ratio", "from source", "epoch s", "stalled");
  const std::string policy(a[kSettings].value(kPolicy, "") == policy_name::kPin
                               ? policy_name::kPin
                               : policy_name::kConsumeOnce);
  const nlohmann::json chosen = a.value(kAdvice, nlohmann::json());
  std::set<std::string> shown;  // budgets that print alike (0.6 and 1.4 MiB) are one row
  bool bounds = false;
  for (const nlohmann::json& p : a.value(kPoints, nlohmann::json::array())) {
    const bool other_tier = p[kTierBytes] != a[kSettings][kTierBytes];
    if (p[kPolicy] != policy && !other_tier && p != chosen) continue;
    const std::string key = fmt::format("{} {} {}", MiB(Num(p, kCacheBytes)),
                                        MiB(Num(p, kTierBytes)), p[kPolicy].get<std::string>());
    if (!shown.insert(key).second && p != chosen) continue;
    table += PointRow(p, chosen);
    bounds = bounds || p.value(kBound, false);
  }
  if (bounds) {
    table += "  <= at most this: the row uses a cost this epoch did not measure\n";
  }
  return table;
}

// Draws the curve with matplotlib (python3-matplotlib), the advice's JSON on its stdin. The
// program gets its arguments as argv, never through a shell: the PNG's name is the user's.
int Plot(const nlohmann::json& advice, const std::string& png) {
  std::string script = GPUFS_ADVICE_PLOT;
  if (!std::filesystem::exists(script)) script = GPUFS_ADVICE_PLOT_SOURCE;
  const std::string python = "/usr/bin/python3";
  int in[2];
  if (pipe2(in, O_CLOEXEC) != 0) {
    return fmt::print(stderr, "gpufs-stat: cannot draw {}: {}\n", png, strerror(errno)), 1;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  std::vector<char*> argv = {const_cast<char*>(python.c_str()), const_cast<char*>(script.c_str()),
                             const_cast<char*>(png.c_str()), nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, python.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  if (spawned != 0) {
    close(in[1]);
    return fmt::print(stderr, "gpufs-stat: cannot run {}: {}\n", python, strerror(spawned)), 1;
  }
  const std::string text = advice.dump();
  signal(SIGPIPE, SIG_IGN);  // a program that exits early is reported by its status
  (void)WriteAll(in[1], text, "the plotting program's input");
  close(in[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fmt::print(stderr, "gpufs-stat: cannot draw {}: {} {} failed (python3-matplotlib installed?)\n",
               png, python, script);
    return 1;
  }
  fmt::print(stderr, "gpufs-stat: drew {}\n", png);
  return 0;
}

// Epochs the kernel's page cache serves never reach gpufsd: the last epoch the daemon saw
// end need not be the last trained. Said where the page cache holds part of the dataset.
std::string KernelLine(const nlohmann::json& a, unsigned epoch) {
  const double share = Num(a, watch_stat::kPageCacheRatio);
  if (share <= 0) return {};
  return fmt::format(
      "kernel       its page cache holds {:.1f}% of the dataset: epochs it serves never reach "
      "gpufsd,\n             so epoch {} is the last gpufsd saw, not necessarily the last "
      "trained\n",
      100 * share, epoch);
}

// Files of groups the budget does not pin: read with their groups through the page cache
// or alone, what each costs the device per file, and what the page cache kept.
std::string MissReadLine(const nlohmann::json& a) {
  using namespace miss_read_stat;
  if (!a.contains(kMissReads) || !a[kMissReads].is_object()) return {};
  const nlohmann::json& m = a[kMissReads];
  if (Num(m, kBreakEven) <= 0) return {};  // no page cache to read into: a store, RAM
  const bool groups = m.value(kChoice, "") == miss_read_name::kGroups;
  const double chosen = Num(m, groups ? kCostGroup : kCostAlone);
  const double other = Num(m, groups ? kCostAlone : kCostGroup);
  const std::string kept =
      m[kKeptMeasured].is_number()
          ? fmt::format("kept {:.0f}% of the files of groups read ahead",
                        100 * Num(m, kKeptMeasured))
          : fmt::format("can keep {:.0f}% of what the budget cannot", 100 * Num(m, kKeptPredicted));
  const std::string better =
      chosen <= other ? ""
                      : fmt::format("\n             --miss-reads auto would read them {}",
                                    groups ? "alone" : "with their groups");
  return fmt::format(
      "not pinned   files read {} (--miss-reads {}): {:.0f} KB moved a file, {:.0f} KB {}\n"
      "             (a request costs as much as {:.0f} KB: {}; the page cache {}){}\n",
      groups ? "with their groups through the page cache" : "alone", m.value(kMode, ""),
      chosen / 1e3, other / 1e3, groups ? "alone" : "with their groups", Num(m, kBreakEven) / 1e3,
      m.value(kDevice, ""), kept, better);
}

}  // namespace

std::string AdviceScreen(const std::string& mount, const nlohmann::json& a) {
  using namespace advice_stat;
  const nlohmann::json& s = a[kSettings];
  std::string out = fmt::format("gpufs-stat --advise {}   {}, cache {}, disk tier {}\n\n", mount,
                                s.value(kPolicy, ""), MiB(Num(s, kCacheBytes)),
                                Num(s, kTierBytes) > 0 ? MiB(Num(s, kTierBytes)) : "none");
  if (a[kVerdict] == kNoEpoch) return out + a.value(kText, "") + "\n";
  using namespace stall_stat;
  const nlohmann::json& m = a[kMeasured];
  out += fmt::format(
      "epoch {} ({})  {:.1f} s, readers waited {:.1f} s ({:.1f}%), demand {:.1f} MB/s\n",
      m.value(stall_stat::kEpoch, 0), a.value(kEnded, false) ? "ended" : "in progress",
      Num(m, kWallS), Num(m, kStalledS), 100 * Num(m, stall_stat::kStallFraction),
      Num(m, kDemandMbPerS));
  out += fmt::format("served from  {}\n", ServedLine(m));
  out += fmt::format("             hit ratio {}: {} served", RatioOf(m, stall_stat::kHitRatio),
                     MiB(Num(m, kBytesServed)));
  if (m[kNotRequested].is_number()) {
    out += fmt::format(", {:.0f} files never asked for (the page cache's)", Num(m, kNotRequested));
  }
  out += "\n" + KernelLine(a, m.value(stall_stat::kEpoch, 0)) + MissReadLine(a);
  if (a[kModel].is_object()) {
    const nlohmann::json& model = a[kModel];
    out += fmt::format(
        "model here   hit ratio {}, epoch {:.1f} s, {:.1f}% stalled   (sample {:.2f} of "
        "groups, {} accesses)\n",
        RatioOf(model, advice_stat::kHitRatio), Num(model, kEpochS),
        100 * Num(model, advice_stat::kStallFraction), Num(s, kSampleRate), s.value(kAccesses, 0));
  }
  out += "\n" + PointTable(a) + "\n";
  return out + a.value(kText, "") + "\n";
}

namespace {

// The advice with what gpufs-stat measures itself (the kernel's page cache of the mount),
// as a screen or JSON, and its plot: none before an epoch, which has no curve to draw.
int Answer(const MountPoint& mount, nlohmann::json advice, const AdviseOptions& options) {
  StatOptions measure;
  measure.timeout_s = options.timeout_s;
  auto share = KernelShare(mount.path, measure);
  advice[watch_stat::kPageCacheRatio] = share ? nlohmann::json(*share) : nlohmann::json();
  if (options.json) {
    fmt::print("{}\n", advice.dump(1));
  } else {
    fmt::print("{}", AdviceScreen(mount.path, advice));
  }
  if (options.plot.empty()) return 0;
  if (advice.value(advice_stat::kVerdict, "") == advice_stat::kNoEpoch) {
    fmt::print(stderr,
               "gpufs-stat: nothing to plot yet: read an epoch through {} first, then ask "
               "again ({} not drawn)\n",
               Printable(mount.path), Printable(options.plot));
    return 1;
  }
  return Plot(advice, options.plot);
}

}  // namespace

int RunAdvise(const std::string& path, const AdviseOptions& options) {
  auto connected = ConnectToMountOf(path, "--advise asks its gpufsd", options.timeout_s);
  if (!connected)
    return fmt::print(stderr, "gpufs-stat: {}\n", PrintableLine(connected.error().message)), 1;
  const MountPoint* mount = &connected->mount;
  const DaemonClient* client = &connected->client;
  auto reply = client->Ask({{"op", "advise"}});
  if (!reply)
    return fmt::print(stderr, "gpufs-stat: {}\n", PrintableLine(reply.error().message)), 1;
  const nlohmann::json advice = nlohmann::json::parse(*reply, nullptr, false);
  if (advice.is_discarded() || !advice.is_object()) {
    return fmt::print(stderr, "gpufs-stat: cannot read the daemon's advice: {}\n",
                      PrintableLine(*reply)),
           1;
  }
  if (advice.contains("error")) {
    return fmt::print(stderr, "gpufs-stat: {}\n",
                      PrintableLine(advice["error"].get<std::string>())),
           1;
  }
  return Answer(*mount, advice, options);
}

}  // namespace gpufs
