// gpufs-stat: what part of a gpufs dataset each cache tier holds (vmtouch-style), and a live
// view of the daemon's counters.
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <thread>

#include "cli/options/usage.h"
#include "cli/stat_advise.h"
#include "cli/stat_report.h"
#include "cli/stat_scan.h"
#include "cli/stat_watch.h"

namespace {

int Failed(const gpufs::Error& error) {
  fmt::print(stderr, "gpufs-stat: {}\n", error.message);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpufs-stat: how much of each path the kernel page cache and the gpufsd pinned and disk "
      "caches "
      "hold (like vmtouch), or a live view of a mount (-w)"};
  app.set_version_flag("--version,-V", std::string("gpufs-stat ") + GPUFS_VERSION);
  std::vector<std::string> paths;
  gpufs::StatOptions options;
  options.threads = std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
  std::string output = "text";
  std::string by = "none";
  bool json = false, per_class = false, watch = false;
  gpufs::WatchOptions watch_options;
  app.add_option("PATH", paths,
                 "files or folders (any, but tiers past the kernel's need a gpufs "
                 "mount); with -w, the mount")
      ->required()
      ->type_name("PATH");
  app.add_flag("--verbose,-v", options.verbose, "each file with its residency chart per tier");
  // --output as the AWS CLI spells it; -o is kept for mount options across the tools.
  app.add_option("--output", output, "text, or kv: one key=value line")
      ->check(CLI::IsMember({"text", "kv"}).description(""))
      ->type_name("{text,kv}");
  app.add_flag("--json", json, "output JSON");
  app.add_option("--by", by, "also summarize per class or per group")
      ->check(CLI::IsMember({"none", "class", "group"}).description(""))
      ->type_name("{none,class,group}");
  app.add_flag("-c", per_class, "same as --by class");
  app.add_option("--threads", options.threads, "threads measuring the kernel page cache")
      ->check(CLI::Range(1u, 256u).description(""))
      ->type_name("N");
  app.add_flag("--watch,-w", watch, "live view of the mount's daemon, refreshed every interval");
  app.add_option("--interval", watch_options.interval_s, "seconds between -w refreshes")
      ->check(CLI::Range(0.05, 3600.0).description(""))
      ->capture_default_str()
      ->type_name("SECONDS");
  app.add_option("--count", watch_options.count, "stop -w after this many refreshes")
      ->type_name("N");
  gpufs::AdviseOptions advise_options;
  bool advise = false;
  app.add_flag("--advise", advise,
               "is training waiting on data, and what --cache-size / --disk-cache-size would "
               "stop it (from the mount's last epoch)");
  app.add_option("--plot", advise_options.plot,
                 "with --advise: draw the model's curve, today's budget and the advice to this PNG")
      ->type_name("FILE.png");
  app.add_option("--timeout", options.timeout_s, "seconds to wait for a daemon's answer")
      ->check(CLI::Range(0.1, 3600.0).description(""))
      ->capture_default_str()
      ->type_name("SECONDS");
  if (auto status = gpufs::ParseUsage(app, argc, argv)) return *status;
  watch_options.timeout_s = options.timeout_s;

  if (advise) {
    if (paths.size() != 1) return fmt::print(stderr, "gpufs-stat: --advise asks one mount\n"), 2;
    advise_options.json = json;
    advise_options.timeout_s = std::max(options.timeout_s, 120.0);  // the model takes seconds
    return gpufs::RunAdvise(paths[0], advise_options);
  }
  if (watch) {
    if (paths.size() != 1) return fmt::print(stderr, "gpufs-stat: -w watches one mount\n"), 2;
    watch_options.terminal = isatty(STDOUT_FILENO) != 0;
    return gpufs::RunWatch(paths[0], watch_options);
  }
  if (per_class) by = "class";
  options.by = by == "class"   ? gpufs::GroupBy::kClass
               : by == "group" ? gpufs::GroupBy::kGroup
                               : gpufs::GroupBy::kNone;
  auto report = gpufs::Measure(paths, options);
  if (!report) return Failed(report.error());
  for (const std::string& note : report->notes) fmt::print(stderr, "gpufs-stat: {}\n", note);
  const auto format = json             ? gpufs::StatFormat::kJson
                      : output == "kv" ? gpufs::StatFormat::kKv
                                       : gpufs::StatFormat::kText;
  gpufs::PrintReport(*report, format, options.by, stdout);
  return 0;
}
