#include "cli/mount_point.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "base/private_files.h"
#include "base/xattr_names.h"
#include "cli/refuse.h"
#include "cli/stat/stat_source.h"
#include "dataset/printable.h"
#include "source/network_fs.h"

namespace gpufs {
namespace {

// As the mount table spells it: no stat of the mount itself, whose daemon may be dead.
std::string TablePath(const std::string& path) {
  std::string shown = std::filesystem::absolute(path).lexically_normal().string();
  if (shown.size() > 1 && shown.back() == '/') shown.pop_back();
  return shown;
}

// Runs fusermount3 with `flags`; empty when it succeeded, else what it said.
std::string Fusermount(const std::string& mountpoint, const char* flags) {
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) return strerror(errno);
  const pid_t helper = fork();
  if (helper == 0) {
    dup2(err[1], STDERR_FILENO);
    execlp("fusermount3", "fusermount3", flags, "--", mountpoint.c_str(), nullptr);
    _exit(127);
  }
  close(err[1]);
  std::string said;
  char buffer[512];
  for (ssize_t n; (n = read(err[0], buffer, sizeof(buffer))) > 0;) said.append(buffer, n);
  close(err[0]);
  int status = 0;
  const bool ok = helper > 0 && waitpid(helper, &status, 0) == helper && WIFEXITED(status) &&
                  WEXITSTATUS(status) == 0;
  if (ok) return {};
  while (!said.empty() && said.back() == '\n') said.pop_back();
  return said.empty() ? "fusermount3 failed" : said;
}

// Whether `link` (a /proc link's target) lies at or beneath `mountpoint`.
bool Beneath(const std::string& link, const std::string& mountpoint) {
  return link == mountpoint || link.starts_with(mountpoint + "/");
}

// The folders of the processes in /proc.
std::vector<std::filesystem::path> ProcessFolders() {
  std::vector<std::filesystem::path> folders;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") == std::string::npos) folders.push_back(entry.path());
  }
  return folders;
}

// "PID (NAME)" of the process at `folder`. Its name is its owner's to set (prctl): escaped
// before root's terminal sees it.
std::string ProcessLabel(const std::filesystem::path& folder) {
  std::string name;
  std::getline(std::ifstream(folder / "comm"), name);
  return fmt::format("{} ({})", folder.filename().string(), Printable(name));
}

// The processes whose working folder, root or open files lie in the mount: "PID (NAME)".
std::vector<std::string> Holders(const std::string& mountpoint) {
  std::vector<std::string> holders;
  std::error_code ec;
  for (const std::filesystem::path& process : ProcessFolders()) {
    bool holds = false;
    for (const char* link : {"cwd", "root"}) {
      holds = holds || Beneath(std::filesystem::read_symlink(process / link, ec), mountpoint);
    }
    for (const auto& fd : std::filesystem::directory_iterator(process / "fd", ec)) {
      if (holds) break;
      holds = Beneath(std::filesystem::read_symlink(fd.path(), ec), mountpoint);
    }
    if (holds) holders.push_back(ProcessLabel(process));
  }
  return holders;
}

// A mount whose daemon has died (or is stopped) answers nothing, so nobody can be waited
// for: the mount is removed, lazily when a reader still holds it, so the folder is usable
// again at once.
int UnmountOrphan(const std::string& mountpoint, const Error& why) {
  fmt::print(stderr, "gpufsd: {}; unmounting it without the daemon\n", PrintableLine(why.message));
  if (Fusermount(mountpoint, "-u").empty()) return 0;
  if (std::string said = Fusermount(mountpoint, "-uz"); said.empty()) {
    fmt::print(stderr, "gpufsd: {} was busy: detached; it goes once its last user lets go\n",
               mountpoint);
    return 0;
  } else {
    return Refuse(Fail(EIO, "cannot unmount {}: {}", mountpoint, said));
  }
}

Error BusyError(const std::string& mountpoint, const std::string& said) {
  const std::vector<std::string> holders = Holders(mountpoint);
  if (holders.empty()) return Fail(EBUSY, "cannot unmount {}: {}", mountpoint, said);
  return Fail(EBUSY,
              "cannot unmount {}: in use by {}; stop them, or `gpufsd unmount --lazy {}` "
              "detaches it now and ends it once they let go (--force: cuts them off now)",
              mountpoint, fmt::join(holders, ", "), mountpoint);
}

// A mount at `path` whose daemon has gone: cleared when it is gpufs's, else refused. The
// kernel may still answer a stat of it from its cache; statfs reaches the daemon. Over
// io_uring, a request made while the dead daemon's ring is being cancelled, before its
// connection is aborted, ends with ECANCELED.
Status ClearDeadMount(const std::string& path) {
  const std::string where = TablePath(path);
  auto mount = MountOf(where);
  struct statfs probe {};
  if (!mount || mount->path != where || statfs(path.c_str(), &probe) == 0 ||
      (errno != ENOTCONN && errno != ECONNABORTED && errno != ECANCELED)) {
    return Ok{};
  }
  if (!mount->is_gpufs()) {
    return Fail(ENOTCONN,
                "cannot mount at {}: a mount whose daemon has gone is there; `fusermount3 -u "
                "{}` clears it",
                path, path);
  }
  if (std::string said = Fusermount(where, "-u"); !said.empty()) {
    if (std::string lazy = Fusermount(where, "-uz"); !lazy.empty()) {
      return Fail(ENOTCONN, "cannot mount at {}: cannot clear the dead gpufs mount there: {}", path,
                  said);
    }
  }
  fmt::print(stderr, "gpufsd: cleared a gpufs mount of {} at {} whose daemon had exited\n",
             Printable(mount->source), where);
  return Ok{};
}

// A second daemon mounted over a FUSE mount hides the first, which keeps running unseen.
Status RefuseStackedMount(const std::string& path) {
  if (FilesystemTypeOf(path) != kFuseMagic) return Ok{};
  std::error_code ec;
  const std::filesystem::path where = std::filesystem::canonical(path, ec);
  auto mount = ec ? Result<MountPoint>(Error{ENOENT, ""}) : MountOf(where);
  if (!mount || mount->path != where.string()) return Ok{};  // a folder inside one is fine
  const std::string type = mount->is_gpufs() ? "gpufs" : mount->type;
  return Fail(EBUSY,
              "cannot mount at {}: it is already a mount ({} of {}); unmount it first with "
              "`gpufsd unmount {}`",
              path, type, mount->source, path);
}

// The first name in the folder at `path` other than . and .., or empty.
std::string FirstEntry(const std::string& path) {
  struct CloseDir {
    void operator()(DIR* d) const { closedir(d); }
  };
  std::unique_ptr<DIR, CloseDir> dir(opendir(path.c_str()));
  if (!dir) return {};
  while (const dirent* entry = readdir(dir.get())) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") return std::string(name);
  }
  return {};
}

// How long unmount waits for the daemon to exit once its mount is gone; after the first
// while, it looks for what keeps it.
constexpr int kDaemonExitMs = 10000;
constexpr int kDaemonNoticeMs = 2000;

bool Exited(int pidfd, int timeout_ms) {
  pollfd wait_exit{pidfd, POLLIN, 0};
  return poll(&wait_exit, 1, timeout_ms) == 1;
}

// Cuts the FUSE connection of `mount` and detaches it, as `umount -f -l` does: the
// daemon's next read of /dev/fuse fails and it exits, and whoever still holds the mount
// gets ENOTCONN. Root asks the kernel directly; another user writes the connection's abort
// file (fusectl), which the kernel gives to the user who mounted it.
Status ForceUnmount(const MountPoint& mount) {
  if (geteuid() == 0) {
    if (umount2(mount.path.c_str(), MNT_FORCE | MNT_DETACH) == 0) return Ok{};
    return Fail(errno, "cannot force {}: {}", mount.path, strerror(errno));
  }
  const std::string minor = mount.device.substr(mount.device.find(':') + 1);
  const std::string abort = fmt::format("/sys/fs/fuse/connections/{}/abort", minor);
  UniqueFd fd(open(abort.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0 || write(fd.get(), "1", 1) != 1) {
    return Fail(errno,
                "cannot force {}: cannot write {}: {} (the fusectl file system is mounted at "
                "/sys/fs/fuse/connections on most systems; root may force any mount)",
                mount.path, abort, strerror(errno));
  }
  if (std::string said = Fusermount(mount.path, "-uz"); !said.empty()) {
    return Fail(EIO, "cannot force {}: {}", mount.path, said);
  }
  return Ok{};
}

// The mount namespaces other than ours where a copy of the mount numbered `device`
// (MAJOR:MINOR) remains, each as "mnt:[INODE] (pid PID (NAME))": one made private before
// the unmount (unshare -m, a container) keeps its copy, and the daemon serves it on.
std::vector<std::string> NamespacesHolding(const std::string& device) {
  std::error_code ec;
  const std::string ours = std::filesystem::read_symlink("/proc/self/ns/mnt", ec).string();
  std::vector<std::string> seen, holding;
  for (const std::filesystem::path& process : ProcessFolders()) {
    const std::string ns = std::filesystem::read_symlink(process / "ns" / "mnt", ec).string();
    if (ec || ns == ours || std::find(seen.begin(), seen.end(), ns) != seen.end()) continue;
    seen.push_back(ns);
    std::ifstream table(process / "mountinfo");
    std::string id, parent, dev, rest;
    bool found = false;
    while (!found && table >> id >> parent >> dev && std::getline(table, rest)) {
      found = dev == device;
    }
    if (found) holding.push_back(fmt::format("{} (pid {})", ns, ProcessLabel(process)));
  }
  return holding;
}

// Waits for the daemon of the unmounted `mount` to exit. One that serves on after a while
// is kept by copies of its mount in other namespaces: they are named, and it fails; with
// `force`, the daemon is told to stop (SIGTERM, through its pidfd), which cuts them off.
Status AwaitDaemon(int pidfd, pid_t pid, const MountPoint& mount, bool force) {
  if (pidfd < 0 || Exited(pidfd, kDaemonNoticeMs)) return Ok{};
  if (const std::vector<std::string> copies = NamespacesHolding(mount.device); !copies.empty()) {
    if (force && syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, nullptr, 0) == 0 &&
        Exited(pidfd, kDaemonExitMs)) {
      fmt::print(stderr, "gpufsd: copies of {} in other mount namespaces ({}) are cut off\n",
                 mount.path, fmt::join(copies, ", "));
      return Ok{};
    }
    return Fail(EBUSY,
                "unmounted {} here, but its daemon (pid {}) serves on: copies of the mount "
                "remain in other mount namespaces: {}; unmount it there, or `kill {}` ends it "
                "(their readers then get errors), as `gpufsd unmount --force` does at once",
                mount.path, pid, fmt::join(copies, ", "), pid);
  }
  if (Exited(pidfd, kDaemonExitMs - kDaemonNoticeMs)) return Ok{};
  return Fail(ETIMEDOUT, "unmounted {}, but its daemon (pid {}) has not exited after {} s",
              mount.path, pid, kDaemonExitMs / 1000);
}

}  // namespace

Status PrepareMountpoint(const std::string& path, bool allow_non_empty) {
  if (Status cleared = ClearDeadMount(path); !cleared.ok()) return cleared;
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    return Fail(err, "cannot mount at {}: {}{}", path, strerror(err),
                err == ENOENT ? fmt::format("; make the folder first (mkdir -p {})", path) : "");
  }
  if (!S_ISDIR(st.st_mode)) return Fail(ENOTDIR, "cannot mount at {}: not a folder", path);
  if (Status stacked = RefuseStackedMount(path); !stacked.ok()) return stacked;
  const std::string entry = FirstEntry(path);
  if (!entry.empty() && !allow_non_empty) {
    return Fail(ENOTEMPTY,
                "cannot mount at {}: it is not empty (it holds {}, which the mount would "
                "hide); name an empty folder, or give --allow-non-empty (fstab: nonempty)",
                path, entry);
  }
  return Ok{};
}

std::string FuseAccessHint() {
  struct stat st {};
  if (stat("/dev/fuse", &st) != 0 || !S_ISCHR(st.st_mode)) {
    return "there is no /dev/fuse here: a container needs it passed in (docker run --device "
           "/dev/fuse --cap-add SYS_ADMIN; on Kubernetes, a privileged container or a FUSE "
           "device plugin), a VM or host the fuse module (modprobe fuse)";
  }
  if (geteuid() == 0) return {};
  const std::string helper = "/usr/bin/fusermount3";
  if (stat(helper.c_str(), &st) != 0) {
    return "a user other than root mounts through fusermount3, which is not installed "
           "(apt-get install fuse3)";
  }
  if ((st.st_mode & S_ISUID) == 0 || st.st_uid != 0) {
    return fmt::format(
        "{} is not setuid root, so a user other than root cannot mount: chmod "
        "u+s {} (as the fuse3 package installs it), or mount as root",
        helper, helper);
  }
  return {};
}

int RunUnmount(const std::string& mountpoint_in, InUse in_use) {
  // The mount table, not the mount itself, says what is there: a stat or getxattr of a
  // mount whose daemon is stopped would never return.
  const std::string mountpoint = TablePath(mountpoint_in);
  auto mount = MountOf(mountpoint);
  if (!mount || mount->path != mountpoint) {
    return Refuse(Fail(EINVAL, "cannot unmount {}: nothing is mounted there", mountpoint));
  }
  if (!mount->is_gpufs()) {
    return Refuse(Fail(EINVAL, "cannot unmount {}: it is a {} mount, not a gpufs one", mountpoint,
                       mount->type));
  }
  auto pid_text = RootXattr(mountpoint, xattr::kPid, 5);
  if (!pid_text) return UnmountOrphan(mountpoint, pid_text.error());
  if (in_use == InUse::kDetach) {
    std::string said = Fusermount(mountpoint, "-uz");
    if (!said.empty()) return Refuse(Fail(EIO, "cannot unmount {}: {}", mountpoint, said));
    fmt::print(stderr, "gpufsd: {} detached; its daemon exits once its last user lets go\n",
               mountpoint);
    return 0;
  }
  const pid_t pid = static_cast<pid_t>(std::atoi(pid_text->c_str()));
  // pidfd lets us wait for a process that is not our child.
  UniqueFd pidfd(static_cast<int>(syscall(SYS_pidfd_open, pid, 0)));
  if (std::string said = Fusermount(mountpoint, "-u"); !said.empty()) {
    const bool busy = said.find("busy") != std::string::npos;
    if (!busy) return Refuse(Fail(EIO, "cannot unmount {}: {}", mountpoint, said));
    if (in_use != InUse::kForce) return Refuse(BusyError(mountpoint, said));
    const std::vector<std::string> holders = Holders(mountpoint);
    if (Status forced = ForceUnmount(*mount); !forced.ok()) return Refuse(forced.error());
    fmt::print(stderr, "gpufsd: {} was in use{}{}: cut off and detached; they get errors now\n",
               mountpoint, holders.empty() ? "" : " by ", fmt::join(holders, ", "));
  }
  if (Status gone = AwaitDaemon(pidfd.get(), pid, *mount, in_use == InUse::kForce); !gone.ok()) {
    return Refuse(gone.error());
  }
  return 0;
}

}  // namespace gpufs
