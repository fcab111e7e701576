// gpufsd: serves grouped image datasets as a read-only ImageFolder tree, and makes and
// checks them.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <thread>

#include "cli/daemon_log.h"
#include "cli/dataset_commands.h"
#include "cli/mount_command.h"
#include "cli/mount_point.h"
#include "cli/options/sizes.h"
#include "cli/options/usage.h"
#include "cli/refuse.h"
#include "fs/metrics.h"
#include "source/remote/address/http_url.h"

namespace {

unsigned DefaultThreads() { return std::max(4u, 2 * std::thread::hardware_concurrency()); }

// argv with mount's -o keys turned into options (cli/options/mount_options.h); nullopt
// after printing why where an -o key is unknown.
std::optional<std::vector<std::string>> Expanded(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  // Only the subcommand: a path named "mount" elsewhere is left alone.
  if (args.size() < 2 || args[1] != "mount") return args;
  const auto mount = args.begin() + 1;
  auto expanded = gpufs::ExpandMountOptions(std::vector<std::string>(mount + 1, args.end()));
  if (!expanded) {
    fmt::print(stderr, "gpufsd mount: {}\n", expanded.error().message);
    return std::nullopt;
  }
  args.erase(mount + 1, args.end());
  args.insert(args.end(), expanded->begin(), expanded->end());
  return args;
}

// Type names as mount's table gives them (N, SIZE, {a,b}), without the checks' own words.
void AddPackOptions(CLI::App& pack, gpufs::PackArgs& args) {
  auto& o = args.options;
  pack.add_option("SRC", args.source, "an ImageFolder tree (<class>/... or <split>/<class>/...)")
      ->required()
      ->type_name("PATH");
  pack.add_option("OUT", args.out, "the dataset folder to create (absent or empty)")
      ->required()
      ->type_name("PATH");
  pack.add_option("--seed", o.seed, "seed of the random grouping")
      ->capture_default_str()
      ->type_name("N");
  pack.add_option("--order", args.order, "random: groups mix classes; class: by path")
      ->check(CLI::IsMember({"random", "class"}).description(""))
      ->capture_default_str()
      ->type_name("{random,class}");
  pack.add_option("--group-size", o.group_size, "most images per group")->type_name("N");
  pack.add_option("--group-bytes", args.group_bytes,
                  "most bytes per group, e.g. 16MiB (the default, unless --group-size alone)")
      ->transform(gpufs::SizeValue().description(""))
      ->type_name("SIZE");
  pack.add_option("--align", o.align, "align members to this many bytes (e.g. 4096)")
      ->capture_default_str()
      ->type_name("N");
  pack.add_option("--splits", args.splits, "split folders above the classes: auto, yes, no")
      ->check(CLI::IsMember({"auto", "yes", "no"}).description(""))
      ->capture_default_str()
      ->type_name("{auto,yes,no}");
  pack.add_option("--threads", o.threads, "blobs written at once")
      ->capture_default_str()
      ->type_name("N");
}

// The dataset commands: index and verify take the same arguments.
struct DatasetCommand {
  std::string source;
  std::optional<uint32_t> group_size;
  unsigned threads = DefaultThreads();
  CLI::App* index = nullptr;
  CLI::App* verify = nullptr;
};

void AddDatasetCommands(CLI::App& app, DatasetCommand& c) {
  c.index = app.add_subcommand(
      "index",
      "write a native index beside a mytar dataset, or add SHA-256 digests to a pack's "
      "(blobs stay as they are)");
  c.verify = app.add_subcommand("verify", "check every member and blob against its checksum");
  for (CLI::App* sub : {c.index, c.verify}) {
    sub->add_option("SRC", c.source, "the dataset")->required()->type_name("PATH");
    sub->add_option("--group-size,-g", c.group_size, "group-size folder of a mytar dataset")
        ->type_name("N");
    sub->add_option("--threads", c.threads, "blobs read at once")
        ->capture_default_str()
        ->type_name("N");
  }
}

// The listings made from the tables of names: mount's options and the metrics' series.
struct Listings {
  bool markdown = false;
  bool json = false;
  CLI::App* options = nullptr;
  CLI::App* metrics = nullptr;
};

void AddListings(CLI::App& app, Listings& l) {
  l.options =
      app.add_subcommand("options", "list mount's options with their fstab (-o) keys and defaults");
  l.options->add_flag("--markdown", l.markdown, "as a Markdown table");
  l.options->add_flag("--json", l.json, "as JSON, for tools")->excludes("--markdown");
  l.metrics = app.add_subcommand(
      "metrics", "list the series that mount --metrics serves, as a Markdown table");
}

int PrintListing(const Listings& l) {
  if (l.metrics->parsed()) {
    fmt::print("{}", gpufs::MetricsListing());
  } else {
    fmt::print("{}", l.json ? gpufs::MountOptionsJson() : gpufs::MountOptionListing(l.markdown));
  }
  return 0;
}

// `gpufsd mount`, or with --dry-run the command line it amounts to, once what can be
// checked without the dataset holds.
int MountCommand(const gpufs::MountArgs& args) {
  if (!args.dry_run) return gpufs::RunMount(args);
  if (gpufs::Status fits = gpufs::CheckCacheFits(args); !fits) return gpufs::Refuse(fits.error());
  fmt::print("gpufsd mount {}\n", fmt::join(gpufs::MountCommandLine(args), " "));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gpufs::EscapeDefaultLog();
  CLI::App app{"gpufsd: serve a grouped image dataset as a read-only ImageFolder tree"};
  app.set_version_flag("--version,-V", std::string("gpufsd ") + GPUFS_VERSION);
  app.require_subcommand(1);

  gpufs::MountArgs mount_args;
  CLI::App* mount = app.add_subcommand("mount", "mount a dataset (returns once it is usable)");
  gpufs::AddMountOptions(*mount, mount_args);
  Listings listings;
  AddListings(app, listings);

  std::string unmount_point;
  CLI::App* unmount =
      app.add_subcommand("unmount", "unmount a gpufs mount and wait for its daemon to exit");
  unmount->add_option("MNT", unmount_point, "the mount point")->required()->type_name("PATH");
  bool lazy = false;
  bool force = false;
  unmount->add_flag("--lazy,-z", lazy,
                    "detach it now, even in use; its daemon exits once the last user lets go");
  unmount
      ->add_flag("--force,-f", force,
                 "even in use: cut it off (its users get errors), detach it, wait for its daemon")
      ->excludes("--lazy");

  gpufs::PackArgs pack_args;
  pack_args.options.threads = DefaultThreads();
  CLI::App* pack = app.add_subcommand("pack", "pack an ImageFolder tree into a native dataset");
  AddPackOptions(*pack, pack_args);
  DatasetCommand dataset;
  AddDatasetCommands(app, dataset);

  auto expanded = Expanded(argc, argv);
  if (!expanded) return gpufs::kUsageError;
  std::vector<char*> args;
  for (std::string& arg : *expanded) args.push_back(arg.data());
  if (auto status = gpufs::ParseUsage(app, static_cast<int>(args.size()), args.data())) {
    return *status;
  }
  // The options hold their own copies: ps and /proc/PID/cmdline need not show a password
  // or a presigned URL's signature.
  for (int i = 1; i < argc; ++i) gpufs::remote::HideSecretsInPlace(argv[i]);
  if (mount->parsed()) return MountCommand(mount_args);
  if (listings.options->parsed() || listings.metrics->parsed()) return PrintListing(listings);
  if (pack->parsed()) return gpufs::RunPack(pack_args);
  if (dataset.index->parsed()) {
    return gpufs::RunIndex(dataset.source, dataset.group_size, dataset.threads);
  }
  if (dataset.verify->parsed()) {
    return gpufs::RunVerify(dataset.source, dataset.group_size, dataset.threads);
  }
  using gpufs::InUse;
  return gpufs::RunUnmount(unmount_point, force  ? InUse::kForce
                                          : lazy ? InUse::kDetach
                                                 : InUse::kRefuse);
}
