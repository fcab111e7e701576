#include "base/private_files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <deque>
#include <vector>

#include "base/file_io.h"

namespace gpufs {
namespace {

constexpr mode_t kPrivateFolderMode = 0700;

std::string RandomTail() {
  uint64_t bits = 0;
  if (getrandom(&bits, sizeof(bits), 0) != sizeof(bits)) {
    // No entropy yet (early boot): O_EXCL still refuses any name planted in advance.
    bits = static_cast<uint64_t>(getpid()) << 32 ^ static_cast<uint64_t>(clock());
  }
  return fmt::format("{:016x}", bits);
}

// Opens the folder `name` beneath `parent_fd` (AT_FDCWD: a path) for listing, never through
// a link at its last step; a link there fails with ELOOP (O_DIRECTORY alone says ENOTDIR).
int OpenFolderNoFollow(int parent_fd, const char* name) {
  const int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 && errno == ENOTDIR && fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      S_ISLNK(st.st_mode)) {
    errno = ELOOP;
  }
  return fd;
}

Result<PrivateFolder> CheckedFolder(int fd, const std::filesystem::path& shown,
                                    const FolderRole& role) {
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) {
      return Fail(EPERM, "cannot use {} {}: it is a symbolic link; name the folder it leads to",
                  role.what, shown.string());
    }
    return Fail(err, "cannot use {} {}: {}", role.what, shown.string(), strerror(err));
  }
  PrivateFolder folder{UniqueFd(fd), {}};
  const std::string problem = PrivateFolderProblem(fd, shown, role, folder.note);
  if (!problem.empty()) {
    return Fail(EPERM, "cannot use {} {}: {}", role.what, shown.string(), problem);
  }
  return folder;
}

// Whether the folder open at `fd` may lie on the way to a private folder: owned by this
// user or root, and written by no one else, or (`sticky_ok`) sticky, where others may add
// names but not replace ours. Empty when it may; else why not. `trusted` says whether no
// one else may write it at all, so that a link in it was put there by this user or root.
std::string LevelProblem(int fd, bool& trusted) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return strerror(errno);
  const uid_t me = geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return fmt::format("it is owned by uid {}, who could replace what lies beneath it", st.st_uid);
  }
  trusted = (st.st_mode & 022) == 0;
  if (!trusted && (st.st_mode & S_ISVTX) == 0) {
    return fmt::format(
        "others may write it (mode {:04o}) and it is not sticky, so they could replace what "
        "lies beneath it",
        st.st_mode & 07777);
  }
  return {};
}

// One folder of the walk below: its descriptor, how messages name it, and whether a link in
// it may be followed.
struct Level {
  UniqueFd fd;
  std::filesystem::path shown;
  bool trusted = false;
};

Error LevelRefused(const FolderRole& role, const std::filesystem::path& dir,
                   const std::filesystem::path& level, const std::string& why) {
  return Fail(EPERM,
              "cannot use {} {}: {}: {}; name a folder whose every level only you or root "
              "may write",
              role.what, dir.string(), level.string(), why);
}

// Opens `name` beneath `levels.back()`, creating it 0700 when missing, and checks it. A link
// there is followed only in a folder no one else may write (its segments are put in front of
// `names`); any other link is refused.
Status NextLevel(std::vector<Level>& levels, std::deque<std::string>& names,
                 const std::string& name, const std::filesystem::path& dir, const FolderRole& role,
                 int& links) {
  Level& here = levels.back();
  const std::filesystem::path shown = here.shown / name;
  mkdirat(here.fd.get(), name.c_str(), kPrivateFolderMode);
  UniqueFd next(OpenFolderNoFollow(here.fd.get(), name.c_str()));
  if (next.get() < 0 && errno == ELOOP) {
    if (!here.trusted)
      return LevelRefused(role, dir, shown, "a symbolic link where others may write");
    char target[PATH_MAX];
    const ssize_t n = readlinkat(here.fd.get(), name.c_str(), target, sizeof(target) - 1);
    if (n < 0 || ++links > 40) return LevelRefused(role, dir, shown, "a link that leads nowhere");
    const std::filesystem::path to(std::string(target, static_cast<size_t>(n)));
    const std::filesystem::path segments = to.relative_path();
    std::vector<std::string> parts;
    for (const auto& part : segments) parts.push_back(part.string());
    names.insert(names.begin(), parts.begin(), parts.end());
    if (to.is_absolute()) levels.resize(1);
    return Ok{};
  }
  if (next.get() < 0) {
    return Fail(errno, "cannot use {} {}: cannot open {}: {}", role.what, dir.string(),
                shown.string(), strerror(errno));
  }
  bool trusted = false;
  const std::string problem = LevelProblem(next.get(), trusted);
  if (!problem.empty()) return LevelRefused(role, dir, shown, problem);
  levels.push_back(Level{std::move(next), shown, trusted});
  return Ok{};
}

// The folder holding `dir`'s last level, opened level by level from '/' beneath each
// descriptor, so that no level another user controls can steer where the folder is.
Result<UniqueFd> OpenLevelsAbove(const std::filesystem::path& dir, const FolderRole& role) {
  std::vector<Level> levels;
  levels.push_back(Level{UniqueFd(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)), "/", false});
  if (std::string problem = LevelProblem(levels[0].fd.get(), levels[0].trusted); !problem.empty()) {
    return LevelRefused(role, dir, "/", problem);
  }
  std::deque<std::string> names;
  for (const auto& part : dir.parent_path().relative_path()) names.push_back(part.string());
  int links = 0;
  while (!names.empty()) {
    const std::string name = std::move(names.front());
    names.pop_front();
    if (name.empty() || name == ".") continue;
    if (name == "..") {
      if (levels.size() > 1) levels.pop_back();
      continue;
    }
    if (Status next = NextLevel(levels, names, name, dir, role, links); !next.ok()) {
      return next.error();
    }
  }
  return std::move(levels.back().fd);
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

std::string PrivateFolderProblem(int fd, const std::filesystem::path& shown, const FolderRole& role,
                                 std::string& note) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a folder";
  const uid_t me = geteuid();
  if (st.st_uid != me) {
    return fmt::format("owned by uid {}, not you (uid {}); {}", st.st_uid, me, role.fix);
  }
  const mode_t mode = st.st_mode & 07777;
  if ((mode & 022) != 0) {
    // Others may already have planted names in it: tightening now would not undo that.
    return fmt::format("writable by others (mode {:04o}); chmod 700 {}", mode, shown.string());
  }
  if ((mode & 077) != 0) {
    if (fchmod(fd, mode & 07700) != 0) {
      return fmt::format("readable by others (mode {:04o}) and cannot be made private: {}", mode,
                         strerror(errno));
    }
    note = fmt::format("{} {} was readable by others (mode {:04o}); it is now 0700", role.what,
                       shown.string(), mode);
  }
  return {};
}

Result<PrivateFolder> OpenPrivateFolder(const std::filesystem::path& dir_in,
                                        const FolderRole& role) {
  std::filesystem::path dir = std::filesystem::absolute(dir_in).lexically_normal();
  if (!dir.has_filename()) dir = dir.parent_path();  // "/a/b/" names b
  if (dir == dir.root_path()) return Fail(EINVAL, "cannot use {} /: name a folder", role.what);
  Result<UniqueFd> parent = OpenLevelsAbove(dir, role);
  if (!parent.ok()) return parent.error();
  return OpenPrivateFolderAt(parent->get(), dir.filename(), dir, role);
}

Result<UniqueFd> OpenFolderAbove(const std::filesystem::path& file, const FolderRole& role) {
  const std::filesystem::path path = std::filesystem::absolute(file).lexically_normal();
  if (!path.has_filename())
    return Fail(EINVAL, "cannot use {} {}: name a file", role.what, path.string());
  return OpenLevelsAbove(path, role);
}

Result<PrivateFolder> OpenPrivateFolderAt(int parent_fd, const std::string& name,
                                          const std::filesystem::path& shown,
                                          const FolderRole& role) {
  mkdirat(parent_fd, name.c_str(), kPrivateFolderMode);
  const int fd = OpenFolderNoFollow(parent_fd, name.c_str());
  return CheckedFolder(fd, shown, role);
}

Result<UniqueFd> CreateNew(int dir_fd, const std::string& name, mode_t mode,
                           const std::filesystem::path& shown) {
  const int fd =
      openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return Fail(errno, "cannot create {}: {}", shown.string(), strerror(errno));
  return UniqueFd(fd);
}

Result<UniqueFd> CreateExclusive(int dir_fd, std::string_view prefix, mode_t mode,
                                 std::string& name, const std::filesystem::path& shown_dir) {
  for (int attempt = 0;; ++attempt) {
    name = fmt::format("{}{}", prefix, RandomTail());
    auto fd = CreateNew(dir_fd, name, mode, shown_dir / name);
    if (fd || fd.error().code != EEXIST || attempt >= 8) return fd;
  }
}

Status ReplaceFileAt(int dir_fd, const std::string& name, std::string_view bytes, mode_t mode,
                     const std::filesystem::path& shown) {
  const std::filesystem::path folder = shown.parent_path();
  std::string temp;
  auto fd = CreateExclusive(dir_fd, name + ".tmp-", mode, temp, folder);
  if (!fd) return fd.error();
  Status written = WriteAll(fd->get(), bytes, folder / temp);
  if (written && fsync(fd->get()) != 0) {
    written = Fail(errno, "cannot sync {}: {}", (folder / temp).string(), strerror(errno));
  }
  *fd = UniqueFd();
  if (written && renameat(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0) {
    written = Fail(errno, "cannot rename {} to {}: {}", (folder / temp).string(), shown.string(),
                   strerror(errno));
  }
  if (!written) {
    unlinkat(dir_fd, temp.c_str(), 0);
    return written;
  }
  if (fsync(dir_fd) != 0) {
    return Fail(errno, "cannot sync {}: {}", folder.string(), strerror(errno));
  }
  return Ok{};
}

Result<UniqueFd> OpenTrustedFile(const std::filesystem::path& path, uid_t also_trusted,
                                 bool follow_link) {
  const int no_follow = follow_link ? 0 : O_NOFOLLOW;
  UniqueFd fd(open(path.c_str(), O_RDONLY | no_follow | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ELOOP && !follow_link) return Error{EPERM, "it is a symbolic link"};
    return Error{errno, strerror(errno)};
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Error{errno, strerror(errno)};
  if (!S_ISREG(st.st_mode)) return Error{EPERM, "it is not a regular file"};
  const uid_t me = geteuid();
  if (st.st_uid != me && st.st_uid != 0 && st.st_uid != also_trusted) {
    const std::string others = also_trusted == me || also_trusted == 0
                                   ? "root"
                                   : fmt::format("the owner of the data (uid {})", also_trusted);
    return Error{EPERM, fmt::format("it is owned by uid {}, neither you (uid {}) nor {}", st.st_uid,
                                    me, others)};
  }
  if ((st.st_mode & 022) != 0) {
    return Error{EPERM, fmt::format("others may write it (mode {:04o})", st.st_mode & 07777)};
  }
  return fd;
}

Status WriteFileAtomically(const std::filesystem::path& path, std::string_view bytes,
                           FileAccess access) {
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
  UniqueFd dir_fd;
  if (access.private_folder) {
    auto opened =
        OpenPrivateFolder(folder, {"cache folder", "give each user a folder of their own"});
    if (!opened) return opened.error();
    dir_fd = std::move(opened->fd);
  } else {
    dir_fd = UniqueFd(open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir_fd.get() < 0) {
      return Fail(errno, "cannot open {}: {}", folder.string(), strerror(errno));
    }
  }
  return ReplaceFileAt(dir_fd.get(), path.filename().string(), bytes, access.mode, path);
}

}  // namespace gpufs
