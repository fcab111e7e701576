#include "cli/mount_command.h"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "cache/arena.h"
#include "cli/control_server.h"
#include "cli/daemon_life.h"
#include "cli/daemon_log.h"
#include "cli/metrics_server.h"
#include "cli/mount_point.h"
#include "cli/mount_wiring.h"
#include "cli/options/kernel_limits.h"
#include "cli/refuse.h"
#include "fs/filesystem.h"
#include "fs/kernel_stat.h"
#include "fuse/uring_transport.h"
#include "source/remote/credentials/credentials.h"

namespace gpufs {
namespace {

// libfuse splits -o lists at commas; a backslash keeps one literal.
std::string EscapeOption(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::vector<std::string> FuseArgv(const MountArgs& args, const Opened& opened) {
  std::vector<std::string> argv = {"gpufsd"};
  // ro makes the kernel refuse writes itself; default_permissions lets it check the modes.
  argv.push_back("-oro,default_permissions,subtype=gpufs,fsname=" + EscapeOption(opened.Label()));
  for (const std::string& option : args.fuse_options) argv.push_back("-o" + option);
  if (args.debug) argv.push_back("-d");
  return argv;
}

int Serve(fuse_session* se, const MountArgs& args) {
  fuse_loop_config* config = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(config, args.max_threads);
  // A descriptor per worker measured no faster or slower here; it spreads the queue on
  // hosts with many cores.
  fuse_loop_cfg_set_clone_fd(config, 1);
  const int rc = fuse_session_loop_mt(se, config);
  fuse_loop_cfg_destroy(config);
  return rc;
}

fuse_session* NewSession(const MountArgs& args, const Opened& opened, FuseContext& context) {
  std::vector<std::string> argv_strings = FuseArgv(args, opened);
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  fuse_args fargs = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  fuse_session* se =
      fuse_session_new(&fargs, &FuseOperations(), sizeof(fuse_lowlevel_ops), &context);
  fuse_opt_free_args(&fargs);  // the session re-parsed them into memory it handed back to us
  if (se && fuse_session_mount(se, args.mountpoint.c_str()) != 0) {
    fuse_session_destroy(se);
    return nullptr;
  }
  return se;
}

// Runs the session until unmounted or signalled; the process exit status.
int ServeUntilUnmounted(fuse_session* se, const MountArgs& args, const std::string& mountpoint,
                        UringTransport* transport) {
  fuse_set_signal_handlers(se);
  const int rc = Serve(se, args);
  fuse_remove_signal_handlers(se);
  fuse_session_unmount(se);
  // The rings' threads hand requests to the session: they end before it does.
  if (transport != nullptr) transport->Stop();
  fuse_session_destroy(se);
  // libfuse reports a stop by SIGINT/SIGTERM/SIGHUP as that (positive) signal number: a
  // requested, clean end. Only a negative value is a failure of the session.
  if (rc < 0) {
    spdlog::error("the FUSE session failed: {}", strerror(-rc));
    return 1;
  }
  spdlog::info("unmounted {}", mountpoint);
  return 0;
}

// FUSE over io_uring under the session where asked for and the kernel has it; nullptr for
// the read/write loop on /dev/fuse (said in the log when auto chose it).
Result<std::unique_ptr<UringTransport>> ChooseTransport(const MountArgs& args, fuse_session* se,
                                                        FuseContext& context) {
  if (args.fuse_transport == fuse_transport_name::kDevFuse)
    return std::unique_ptr<UringTransport>();
  if (const std::string why = UringUnavailable(); !why.empty()) {
    if (args.fuse_transport == fuse_transport_name::kIoUring) {
      return Fail(EOPNOTSUPP, "cannot use --fuse-transport io_uring: {}", why);
    }
    spdlog::info("the kernel's requests go through /dev/fuse: {}", why);
    return std::unique_ptr<UringTransport>();
  }
  // The queues share the worker threads --threads allows, at least two each so that a
  // read waiting on a load leaves its queue served, and no more than 256 in all: each
  // holds a request's buffer (up to 1 MiB) whether its CPU sends requests or not.
  const unsigned queues = std::max(UringTransport::PossibleCpus(), 1u);
  const unsigned per_queue = std::clamp(std::min(args.max_threads, 256u) / queues, 2u, 8u);
  return UringTransport::Install(se, context, per_queue);
}

// In the daemon: the cache stack over the opened source, the core and its side servers,
// then FUSE until the mount goes away.
int ServeMount(const MountArgs& args, const MountPlan& plan, Opened& opened, fuse_session* se,
               FuseContext& context, std::unique_ptr<MetricsServer> metrics, int ready_fd) {
  // Said once, and handed to the stats as said.
  nlohmann::json kernel = KernelLimitsJson(args);
  spdlog::info("kernel: {}", kernel.dump());
  auto stack = MakeCacheStack(args, plan, opened);
  if (!stack) {
    spdlog::error("{}", stack.error().message);
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    return 1;
  }
  Filesystem fs(opened.dataset.catalog, *stack->source,
                ServeOptions{Owner{getuid(), getgid()}, opened.dataset.mtime, opened.Label(),
                             opened.dataset.format, args.verify, stack->gpu, std::move(kernel)},
                stack->cache.get());
  context.fs = &fs;
  // The control socket only reports; a mount without it still serves its data.
  auto control = ControlServer::Start(fs);
  if (control) {
    fs.SetControlPath((*control)->path());
  } else {
    spdlog::warn("gpufs-stat will see the kernel cache only: {}", control.error().message);
  }
  if (metrics) metrics->Start(fs);
  const std::string mountpoint = std::filesystem::absolute(args.mountpoint).string();
  // INIT is answered after this callback returns; a statfs from another thread waits for
  // that answer, so "ready" is sent only once the mount really serves requests.
  context.on_init = [&, ready_fd] {
    std::thread([&, ready_fd] {
      struct statfs probe {};
      statfs(mountpoint.c_str(), &probe);
      RaiseReadahead(mountpoint, args.max_readahead_kib);
      spdlog::info("serving {} files ({}) from {} at {}, the kernel's requests through {}",
                   opened.dataset.catalog.file_count(), opened.dataset.format, opened.Label(),
                   mountpoint, fs.KernelStats()[kernel_stat::kTransport].get<std::string>());
      SignalReady(ready_fd);
      if (!args.foreground) DropTerminal();
    }).detach();
  };
  if (context.transport != nullptr) {
    fs.SetTransport([transport = context.transport] {
      return nlohmann::json{{kernel_stat::kTransport, transport->Describe()},
                            {kernel_stat::kRingRequests, transport->RingRequests()}};
    });
  }
  const int rc = ServeUntilUnmounted(se, args, mountpoint, context.transport);
  metrics.reset();  // its thread reads fs, which goes first otherwise
  return rc;
}

}  // namespace

int RunMount(const MountArgs& args_in) {
  MountArgs args = args_in;
  AnchorPaths(args);
  if (args.debug) args.foreground = true;
  auto log = DaemonLog::Open(args.log, args.foreground);
  if (!log) return Refuse(log.error());
  RaiseFileLimit();
  auto plan = PlanMount(args);
  if (!plan) return Refuse(plan.error());
  auto opened = OpenForMount(args, *plan);
  if (!opened) return Refuse(opened.error());
  const Dataset* dataset = &opened->dataset;
  std::unique_ptr<MetricsServer> metrics;
  if (!args.metrics.empty()) {
    auto bound = MetricsServer::Bind(args.metrics);
    if (!bound) return Refuse(bound.error());
    metrics = std::move(*bound);
  }
  SizeDefaultBudget(args, dataset->catalog.total_bytes() +
                              uint64_t{dataset->catalog.group_count()} * PinnedArena::kAlign);
  ChooseKernelLimits(args, dataset->catalog.total_bytes(), std::thread::hardware_concurrency(),
                     MemoryLimit());
  FuseContext context;
  context.cache = args.cache;
  fuse_session* se = NewSession(args, *opened, context);
  if (se == nullptr) {
    const std::string hint = FuseAccessHint();
    return Refuse(Fail(EIO, "cannot mount at {}{}", args.mountpoint,
                       hint.empty() ? " (see above)" : ": " + hint));
  }

  auto transport = ChooseTransport(args, se, context);
  if (!transport) {
    fuse_session_unmount(se);
    fuse_session_destroy(se);
    return Refuse(transport.error());
  }

  int ready_fd = args.ready_fd;
  const auto credentials = opened->location ? opened->location->config.credentials : nullptr;
  if (!args.foreground) {
    if (credentials) credentials->StopRefresher();  // restarted in the daemon, past the fork
    ready_fd = Detach();
    if (ready_fd < 0) return Refuse(Fail(errno, "cannot detach: {}", strerror(errno)));
    log->UseInDaemon();
  }
  if (credentials) credentials->StartRefresher();
  return ServeMount(args, *plan, *opened, se, context, std::move(metrics), ready_fd);
}

}  // namespace gpufs
