// gpufsd: serves grouped image datasets as a read-only ImageFolder tree.
#include <CLI/CLI.hpp>

#include "cli/mount_command.h"

namespace {

void AddMountOptions(CLI::App& mount, gpufs::MountArgs& args) {
  mount
      .add_option("SRC", args.source,
                  "dataset: the folder holding metadata.txt, or its parent with one group-size "
                  "folder")
      ->required();
  mount.add_option("MNT", args.mountpoint, "existing empty folder to mount at")->required();
  mount.add_option("--group-size,-g", args.group_size,
                   "group-size folder to use when SRC holds several");
  mount.add_flag("--foreground,-f", args.foreground, "stay in the foreground, log to stderr");
  mount.add_flag("--debug,-d", args.debug, "log every FUSE request (implies -f)");
  mount.add_option("-o", args.fuse_options,
                   "FUSE mount options, comma-separated (e.g. allow_other); repeatable");
  mount.add_option("--threads", args.max_threads, "most FUSE worker threads")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1024u));
  mount
      .add_option("--max-readahead", args.max_readahead_kib,
                  "kernel read-ahead of the mount in KiB (needs root; 0 keeps the default)")
      ->capture_default_str();
  mount.add_option("--ready-fd", args.ready_fd,
                   "write \"ready\" to this descriptor once the mount serves requests");
  auto& cache = args.cache;
  mount.add_option("--entry-timeout", cache.entry_timeout_s, "seconds the kernel caches names")
      ->capture_default_str();
  mount.add_option("--attr-timeout", cache.attr_timeout_s, "seconds the kernel caches attributes")
      ->capture_default_str();
  mount.add_flag_callback(
      "--no-keep-cache", [&cache] { cache.keep_cache = false; },
      "drop a file's page cache whenever it is opened again");
  mount.add_flag_callback(
      "--no-readdirplus", [&cache] { cache.readdirplus = false; },
      "list folders without attributes (one lookup per file follows)");
  mount.add_flag_callback(
      "--open-calls", [&cache] { cache.no_open = false; },
      "answer every open() instead of letting the kernel skip them");
  mount.add_flag_callback(
      "--no-splice", [&cache] { cache.splice = false; }, "copy read data through user space");
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

  CLI11_PARSE(app, argc, argv);
  if (mount->parsed()) return gpufs::RunMount(mount_args);
  return gpufs::RunUnmount(unmount_point);
}
