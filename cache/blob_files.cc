#include "cache/blob_files.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>

namespace gpufs {

BlobFiles::BlobFiles(std::filesystem::path dir, std::vector<std::string> names)
    : dir_(std::move(dir)),
      names_(std::move(names)),
      fds_(std::make_unique<std::atomic<int>[]>(names_.size())),
      direct_fds_(std::make_unique<std::atomic<int>[]>(names_.size())) {
  for (size_t i = 0; i < names_.size(); ++i) {
    fds_[i].store(-1, std::memory_order_relaxed);
    direct_fds_[i].store(-1, std::memory_order_relaxed);
  }
}

BlobFiles::~BlobFiles() {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (int fd = fds_[i].load(std::memory_order_relaxed); fd >= 0) close(fd);
    if (int fd = direct_fds_[i].load(std::memory_order_relaxed); fd >= 0) close(fd);
  }
}

Result<int> BlobFiles::Fd(uint32_t group) {
  if (group >= names_.size()) return Fail(EIO, "cannot open blob #{}: no such group", group);
  int fd = fds_[group].load(std::memory_order_acquire);
  if (fd >= 0) return fd;
  const std::filesystem::path path = PathOf(group);
  // O_NOATIME spares a metadata write per read; it is refused for files we do not own.
  fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (fd < 0 && errno == EPERM) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail(errno, "cannot open blob {}: {}", path.string(), strerror(errno));
  int expected = -1;
  if (!fds_[group].compare_exchange_strong(expected, fd, std::memory_order_acq_rel)) {
    close(fd);  // another thread opened it first; use theirs
    return expected;
  }
  return fd;
}

Result<BlobFiles::Handle> BlobFiles::DirectFd(uint32_t group) {
  if (group >= names_.size()) return Fail(EIO, "cannot open blob #{}: no such group", group);
  int fd = direct_fds_[group].load(std::memory_order_acquire);
  if (fd == -1) {
    const std::filesystem::path path = PathOf(group);
    fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT | O_NOATIME);
    if (fd < 0 && errno == EPERM) fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (fd < 0 && errno != EINVAL) {
      return Fail(errno, "cannot open blob {}: {}", path.string(), strerror(errno));
    }
    if (fd < 0) fd = -2;  // this filesystem has no O_DIRECT (tmpfs, some FUSE)
    int expected = -1;
    if (!direct_fds_[group].compare_exchange_strong(expected, fd, std::memory_order_acq_rel)) {
      if (fd >= 0) close(fd);
      fd = expected;
    }
  }
  if (fd >= 0) return Handle{fd, true};
  auto buffered = Fd(group);
  if (!buffered) return buffered.error();
  return Handle{*buffered, false};
}

Result<size_t> BlobFiles::ReadAt(uint32_t group, uint64_t offset, void* buffer, size_t size) {
  auto fd = Fd(group);
  if (!fd) return fd.error();
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(*fd, static_cast<char*>(buffer) + done, size - done,
                            static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return Fail(errno, "cannot read blob {} at offset {}: {}", PathOf(group).string(),
                  offset + done, strerror(errno));
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
