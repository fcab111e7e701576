#include "base/file_io.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace gpufs {

Result<std::string> ReadWholeFile(const std::filesystem::path& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP) {
    return Fail(ELOOP, "cannot open {}: it is a symbolic link", path.string());
  }
  if (fd < 0) return Fail(errno, "cannot open {}: {}", path.string(), strerror(errno));
  std::string text;
  struct stat st {};
  if (fstat(fd, &st) == 0 && st.st_size > 0) text.reserve(static_cast<size_t>(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return Fail(err, "cannot read {}: {}", path.string(), strerror(err));
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

Status WriteAll(int fd, std::string_view bytes, const std::filesystem::path& path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(errno, "cannot write {}: {}", path.string(), strerror(errno));
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Ok{};
}

Status SyncFolder(const std::filesystem::path& folder) {
  const int fd = open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Fail(errno, "cannot open {}: {}", folder.string(), strerror(errno));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return Fail(err, "cannot sync {}: {}", folder.string(), strerror(err));
  return Ok{};
}

int OpenBeneath(int dir_fd, const std::string& name, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  // EAGAIN: a rename raced the walk; a few more tries, then it is the caller's error.
  for (int attempt = 0;; ++attempt) {
    const long fd = syscall(SYS_openat2, dir_fd, name.c_str(), &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    if (errno == EINTR || (errno == EAGAIN && attempt < 8)) continue;
    if (errno != ENOSYS) return -1;
    return openat(dir_fd, name.c_str(), flags | O_NOFOLLOW);
  }
}

Result<struct stat> StatBeneath(int dir_fd, const std::string& name) {
  const int fd = OpenBeneath(dir_fd, name, O_PATH | O_CLOEXEC);
  struct stat st {};
  if (fd >= 0 && fstat(fd, &st) == 0) {
    close(fd);
    return st;
  }
  const int err = errno;
  if (fd >= 0) close(fd);
  if (err == EXDEV || err == ELOOP) {
    return Error{EINVAL, "it leads outside the dataset folder"};
  }
  return Error{err, strerror(err)};
}

}  // namespace gpufs
