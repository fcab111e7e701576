#include "source/blob_files.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

#include "base/file_io.h"

namespace gpufs {

BlobFiles::BlobFiles(std::filesystem::path dir, std::vector<std::string> names,
                     std::vector<BlobInfo> expected)
    : dir_(std::move(dir)),
      names_(std::move(names)),
      expected_(std::move(expected)),
      fds_(std::make_unique<std::atomic<int>[]>(names_.size())),
      direct_fds_(std::make_unique<std::atomic<int>[]>(names_.size())) {
  for (size_t i = 0; i < names_.size(); ++i) {
    fds_[i].store(-1, std::memory_order_relaxed);
    direct_fds_[i].store(-1, std::memory_order_relaxed);
  }
  dir_fd_ = open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd_ < 0) dir_errno_ = errno;
}

BlobFiles::~BlobFiles() {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (int fd = fds_[i].load(std::memory_order_relaxed); fd >= 0) close(fd);
    if (int fd = direct_fds_[i].load(std::memory_order_relaxed); fd >= 0) close(fd);
  }
  if (dir_fd_ >= 0) close(dir_fd_);
}

const BlobInfo* BlobFiles::Expected(uint32_t blob) const {
  return blob < expected_.size() ? &expected_[blob] : nullptr;
}

// Opens without following anything out of the folder. O_NONBLOCK only for the open
// itself: a blob replaced by a fifo must not hold a FUSE thread in open(). It is cleared
// again at once, since io_uring answers EAGAIN instead of waiting on a non-blocking file.
// O_NOATIME spares a metadata write per read; it is refused for files we do not own.
Result<int> BlobFiles::Open(uint32_t blob, int flags) {
  if (dir_fd_ < 0) {
    return Fail(EIO, "cannot open blob {}: its folder cannot be opened: {}", PathOf(blob).string(),
                strerror(dir_errno_));
  }
  flags |= O_RDONLY | O_CLOEXEC | O_NONBLOCK;
  int fd = OpenBeneath(dir_fd_, names_[blob], flags | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = OpenBeneath(dir_fd_, names_[blob], flags);
  struct stat st {};
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    return Fail(EIO, "cannot open blob {}: it is no longer a regular file", PathOf(blob).string());
  }
  if (fd >= 0) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
  }
  const int err = errno;
  if (err == EINVAL && (flags & O_DIRECT)) return Error{EINVAL, "no O_DIRECT"};
  const char* why = err == ENOENT                  ? "it is gone (deleted since the mount)"
                    : err == EXDEV || err == ELOOP ? "it now leads outside the dataset folder"
                                                   : strerror(err);
  return Fail(EIO, "cannot open blob {}: {}", PathOf(blob).string(), why);
}

Status BlobFiles::CheckUnchanged(uint32_t blob, int fd) const {
  const BlobInfo* seen = Expected(blob);
  if (!seen) return Ok{};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return Fail(EIO, "cannot check blob {}: {}", PathOf(blob).string(), strerror(errno));
  }
  const int64_t mtime_ns = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != seen->size ||
      (seen->mtime_ns != 0 && mtime_ns != seen->mtime_ns)) {
    return Fail(EIO,
                "cannot read blob {}: it changed since the mount (now {} bytes, modified at "
                "{} ns; the mount saw {} bytes, modified at {} ns); remount to serve it as it is",
                PathOf(blob).string(), st.st_size, mtime_ns, seen->size, seen->mtime_ns);
  }
  return Ok{};
}

Result<int> BlobFiles::Fd(uint32_t blob) {
  if (blob >= names_.size()) return Fail(EIO, "cannot open blob #{}: no such blob", blob);
  int fd = fds_[blob].load(std::memory_order_acquire);
  if (fd < 0) {
    auto opened = Open(blob, 0);
    if (!opened) return opened.error();
    int expected = -1;
    fd = *opened;
    // Reads of it are members in random order or whole ranges: the kernel's read-ahead
    // past them would read what nobody asked for, and split the large pages of a group
    // read into the page cache (page_cache_ahead.h).
    posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    if (!fds_[blob].compare_exchange_strong(expected, fd, std::memory_order_acq_rel)) {
      close(fd);  // another thread opened it first; use theirs
      fd = expected;
    }
  }
  if (Status s = CheckUnchanged(blob, fd); !s) return s.error();
  return fd;
}

Result<BlobFiles::Handle> BlobFiles::DirectFd(uint32_t blob) {
  if (blob >= names_.size()) return Fail(EIO, "cannot open blob #{}: no such blob", blob);
  int fd = direct_fds_[blob].load(std::memory_order_acquire);
  if (fd == -1) {
    auto opened = Open(blob, O_DIRECT);
    if (!opened && opened.error().code != EINVAL) return opened.error();
    fd = opened ? *opened : -2;  // -2: this filesystem has no O_DIRECT (tmpfs, some FUSE)
    int expected = -1;
    if (!direct_fds_[blob].compare_exchange_strong(expected, fd, std::memory_order_acq_rel)) {
      if (fd >= 0) close(fd);
      fd = expected;
    }
  }
  if (fd >= 0) {
    if (Status s = CheckUnchanged(blob, fd); !s) return s.error();
    return Handle{fd, true};
  }
  auto buffered = Fd(blob);
  if (!buffered) return buffered.error();
  return Handle{*buffered, false};
}

Result<size_t> BlobFiles::ReadAt(uint32_t blob, uint64_t offset, void* buffer, size_t size) {
  auto fd = Fd(blob);
  if (!fd) return fd.error();
  return PreadAll(blob, *fd, offset, buffer, size);
}

Result<size_t> BlobFiles::ReadToServe(uint32_t blob, uint64_t offset, void* buffer, size_t size) {
  auto fd = Fd(blob);
  if (!fd) return fd.error();
  auto got = PreadAll(blob, *fd, offset, buffer, size);
  posix_fadvise(*fd, static_cast<off_t>(offset), static_cast<off_t>(size), POSIX_FADV_DONTNEED);
  return got;
}

Result<size_t> BlobFiles::ReadCachedToServe(uint32_t blob, uint64_t offset, void* buffer,
                                            size_t size) {
  auto fd = Fd(blob);
  if (!fd) return fd.error();
  struct iovec iov {
    buffer, size
  };
  ssize_t n = -1;
  do {
    n = preadv2(*fd, &iov, 1, static_cast<off_t>(offset), RWF_NOWAIT);
  } while (n < 0 && errno == EINTR);
  // Short where a page is missing (or the blob ends, which a member never does).
  if (n < 0 || static_cast<size_t>(n) < size) {
    return Fail(EAGAIN, "{} at offset {}: not in the page cache", PathOf(blob).string(), offset);
  }
  posix_fadvise(*fd, static_cast<off_t>(offset), static_cast<off_t>(size), POSIX_FADV_DONTNEED);
  return static_cast<size_t>(n);
}

Result<size_t> BlobFiles::PreadAll(uint32_t blob, int fd, uint64_t offset, void* buffer,
                                   size_t size) const {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, static_cast<char*>(buffer) + done, size - done,
                            static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Fail(EIO, "cannot read blob {} at offset {}: {}", PathOf(blob).string(), offset + done,
                  strerror(errno));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

void RaiseFileLimit() {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

}  // namespace gpufs
