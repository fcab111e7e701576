// gpufs-stat: what part of a gpufs dataset each cache tier holds (vmtouch-style), and a live
// view of the daemon's counters.
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <thread>

#include "cli/options/usage.h"
#include "cli/stat/stat_advise.h"
#include "cli/stat/stat_report.h"
#include "cli/stat/stat_scan.h"
#include "cli/stat/stat_watch.h"
#include "dataset/printable.h"

namespace {

int Failed(const gpufs::Error& error) {
  fmt::print(stderr, "gpufs-stat: {}\n", gpufs::PrintableLine(error.message));
  return 1;
}

// Every option of gpufs-stat, and where it goes.
struct StatArgs {
  std::vector<std::string> paths;
  gpufs::StatOptions options;
  std::string output = "text";
  std::string by = "none";
  bool json = false, per_class = false, watch = false, advise = false;
  gpufs::WatchOptions watch_options;
  gpufs::AdviseOptions advise_options;
};

// The options of the report itself (vmtouch's view).
void AddReportOptions(CLI::App& app, StatArgs& a) {
  app.add_option("PATH", a.paths,
                 "files or folders (any, but tiers past the kernel's need a gpufs "
                 "mount); with -w, the mount")
      ->required()
      ->type_name("PATH");
  app.add_flag("--verbose,-v", a.options.verbose, "each file with its residency chart per tier");
  // --output as the AWS CLI spells it; -o is kept for mount options across the tools.
  app.add_option("--output", a.output, "text, or kv: one key=value line")
      ->check(CLI::IsMember({"text", "kv"}).description(""))
      ->type_name("{text,kv}");
  app.add_flag("--json", a.json, "output JSON (with -w, a JSON object per refresh)");
  app.add_option("--by", a.by, "also summarize per class or per group")
      ->check(CLI::IsMember({"none", "class", "group"}).description(""))
      ->type_name("{none,class,group}");
  app.add_flag("-c", a.per_class, "same as --by class");
  app.add_option("--threads", a.options.threads, "threads measuring the kernel page cache")
      ->check(CLI::Range(1u, 256u).description(""))
      ->type_name("N");
}

// The live view (-w), the advice, and the timeout they share with the report.
void AddDaemonOptions(CLI::App& app, StatArgs& a) {
  app.add_flag("--watch,-w", a.watch, "live view of the mount's daemon, refreshed every interval");
  app.add_option("--interval", a.watch_options.interval_s, "seconds between -w refreshes")
      ->check(CLI::Range(0.05, 3600.0).description(""))
      ->capture_default_str()
      ->type_name("SECONDS");
  app.add_option("--count", a.watch_options.count, "stop -w after this many refreshes")
      ->type_name("N");
  app.add_flag("--advise", a.advise,
               "is training waiting on data, and what --cache-size / --disk-cache-size would "
               "stop it (from the mount's last epoch)");
  app.add_option("--plot", a.advise_options.plot,
                 "with --advise: draw the model's curve, today's budget and the advice to this PNG")
      ->type_name("FILE.png");
  app.add_option("--timeout", a.options.timeout_s, "seconds to wait for a daemon's answer")
      ->check(CLI::Range(0.1, 3600.0).description(""))
      ->capture_default_str()
      ->type_name("SECONDS");
}

int Report(StatArgs& a) {
  if (a.per_class) a.by = "class";
  a.options.by = a.by == "class"   ? gpufs::GroupBy::kClass
                 : a.by == "group" ? gpufs::GroupBy::kGroup
                                   : gpufs::GroupBy::kNone;
  auto report = gpufs::Measure(a.paths, a.options);
  if (!report) return Failed(report.error());
  for (const std::string& note : report->notes)
    fmt::print(stderr, "gpufs-stat: {}\n", gpufs::PrintableLine(note));
  const auto format = a.json             ? gpufs::StatFormat::kJson
                      : a.output == "kv" ? gpufs::StatFormat::kKv
                                         : gpufs::StatFormat::kText;
  gpufs::PrintReport(*report, format, a.options.by, stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gpufs-stat: how much of each path the kernel page cache and the gpufsd pinned and disk "
      "caches hold (like vmtouch), or a live view of a mount (-w)"};
  app.set_version_flag("--version,-V", std::string("gpufs-stat ") + GPUFS_VERSION);
  StatArgs a;
  a.options.threads = std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
  AddReportOptions(app, a);
  AddDaemonOptions(app, a);
  if (auto status = gpufs::ParseUsage(app, argc, argv)) return *status;
  a.watch_options.timeout_s = a.options.timeout_s;
  if (a.advise) {
    if (a.paths.size() != 1) return fmt::print(stderr, "gpufs-stat: --advise asks one mount\n"), 2;
    a.advise_options.json = a.json;
    a.advise_options.timeout_s = std::max(a.options.timeout_s, 120.0);  // the model takes seconds
    return gpufs::RunAdvise(a.paths[0], a.advise_options);
  }
  if (a.watch) {
    if (a.paths.size() != 1) return fmt::print(stderr, "gpufs-stat: -w watches one mount\n"), 2;
    a.watch_options.json = a.json;
    a.watch_options.terminal = !a.json && isatty(STDOUT_FILENO) != 0;
    return gpufs::RunWatch(a.paths[0], a.watch_options);
  }
  return Report(a);
}
