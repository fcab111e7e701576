#include "dataset/format/private_files.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "dataset/format/file_io.h"

namespace gpufs {
namespace {

constexpr mode_t kPrivateFolderMode = 0700;

// Creates each missing level of `dir` 0700, the last included: a parent gpufs makes (such
// as ~/.cache) is no more open than the folder it holds.
void MakeMissingLevels(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> missing;
  struct stat st {};
  for (std::filesystem::path p = dir; !p.empty() && stat(p.c_str(), &st) != 0 && errno == ENOENT;
       p = p.parent_path()) {
    missing.push_back(p);
    if (p == p.root_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it)
    mkdir(it->c_str(), kPrivateFolderMode);
}

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
  const std::filesystem::path dir = std::filesystem::absolute(dir_in).lexically_normal();
  MakeMissingLevels(dir);
  const int fd = OpenFolderNoFollow(AT_FDCWD, dir.c_str());
  return CheckedFolder(fd, dir, role);
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

Result<UniqueFd> OpenTrustedIndex(const std::filesystem::path& index, uid_t data_owner) {
  UniqueFd fd(open(index.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ELOOP) return Error{EPERM, "it is a symbolic link"};
    return Error{errno, strerror(errno)};
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return Error{errno, strerror(errno)};
  if (!S_ISREG(st.st_mode)) return Error{EPERM, "it is not a regular file"};
  const uid_t me = geteuid();
  if (st.st_uid != me && st.st_uid != data_owner) {
    return Error{EPERM, fmt::format("it is owned by uid {}, neither you (uid {}) nor the "
                                    "owner of the data (uid {})",
                                    st.st_uid, me, data_owner)};
  }
  if ((st.st_mode & 022) != 0) {
    return Error{EPERM, fmt::format("others may write it (mode {:04o})", st.st_mode & 07777)};
  }
  return fd;
}

}  // namespace gpufs
