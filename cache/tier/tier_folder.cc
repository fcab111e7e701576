// The disk tier's shared folder (disk_tier.h): the copies under its dataset folders, the
// temporary files of writers, and the ledger file every daemon that shares the folder
// counts its bytes in.
#include "cache/tier/tier_folder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/file.h>
#include <sys/statvfs.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

namespace gpufs {
namespace {

// A temporary file this old belongs to a writer that died; it is deleted on the next count.
constexpr auto kStaleTemp = std::chrono::hours(1);

// A folder that is closed when it goes out of scope, read with readdir.
struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};
using DirHandle = std::unique_ptr<DIR, DirCloser>;

// The folder `name` beneath `parent_fd` for listing, never through a link.
DirHandle OpenListing(int parent_fd, const char* name) {
  const int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return nullptr;
  DIR* d = fdopendir(fd);
  if (!d) close(fd);
  return DirHandle(d);
}

// Dataset folders are named by TierDatasetFolder: "<name>-<16 hex digits>". Anything else
// under root is not the tier's, and is neither counted nor deleted.
bool IsDatasetFolder(const std::string& name) {
  if (name.size() < 18 || name[name.size() - 17] != '-') return false;
  return std::all_of(name.end() - 16, name.end(), [](char c) { return std::isxdigit(c); });
}

// The files of one dataset folder (open as `dir`): their bytes in all (but this daemon's
// writes in progress), and the copies among them. Temporary files of dead writers are
// deleted on the way.
uint64_t ScanDataset(DIR* dir, const std::string& dataset, std::vector<TierCopy>* copies) {
  const std::string own_temp = OwnTempPrefix();
  uint64_t used = 0;
  const auto stale_before = std::chrono::system_clock::now() - kStaleTemp;
  const int fd = dirfd(dir);
  while (const dirent* entry = readdir(dir)) {
    struct stat st {};
    if (fstatat(fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    const std::string name = entry->d_name;
    if (name.starts_with(kTierTempPrefix) &&
        std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec) < stale_before) {
      unlinkat(fd, name.c_str(), 0);
      continue;
    }
    if (name.starts_with(own_temp)) continue;
    used += static_cast<uint64_t>(st.st_size);
    if (copies && name.ends_with(kTierCopySuffix)) {
      copies->push_back(TierCopy{dataset, name, static_cast<uint64_t>(st.st_size), st.st_mtim});
    }
  }
  return used;
}

}  // namespace

bool ReadBefore(const TierCopy& a, const TierCopy& b) {
  return a.mtime.tv_sec != b.mtime.tv_sec ? a.mtime.tv_sec < b.mtime.tv_sec
                                          : a.mtime.tv_nsec < b.mtime.tv_nsec;
}

// This daemon's temporary files: what it writes now, counted by its reservations
// (pending_) rather than by the bytes written so far, which would count them twice.
std::string OwnTempPrefix() { return fmt::format("{}{}-", kTierTempPrefix, getpid()); }

// Every file under root's dataset folders (root open at `root_fd`), each folder reached
// beneath it without following a link: their bytes in all, and the copies among them.
uint64_t ScanRoot(int root_fd, std::vector<TierCopy>* copies) {
  uint64_t used = 0;
  DirHandle root = OpenListing(root_fd, ".");
  while (const dirent* entry = root ? readdir(root.get()) : nullptr) {
    if (!IsDatasetFolder(entry->d_name)) continue;
    if (DirHandle dataset = OpenListing(root_fd, entry->d_name)) {
      used += ScanDataset(dataset.get(), entry->d_name, copies);
    }
  }
  return used;
}

// The disk cache's root and dataset folders: private to the user who mounts.
const FolderRole& TierRole() {
  static const FolderRole role{"disk cache",
                               "give each user a folder of their own (--disk-cache DIR)"};
  return role;
}

// ROOT/.ledger, created 0600 exclusively or, when there, opened without following a link
// and checked to be ours. Returns the descriptor, or -1 with `why` set.
int OpenLedger(int root_fd, std::string& why) {
  int fd = openat(root_fd, kTierLedger, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno == EEXIST)
    fd = openat(root_fd, kTierLedger, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) {
    why = errno == ELOOP ? "it is a symbolic link" : strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (st.st_uid != geteuid()) {
    why =
        fmt::format("owned by uid {}, not you (uid {}); {}", st.st_uid, geteuid(), TierRole().fix);
  } else if ((st.st_mode & 077) != 0 && fchmod(fd, 0600) != 0) {
    why = strerror(errno);
  } else {
    return fd;
  }
  if (fd >= 0) close(fd);
  return -1;
}

// Deletes `copy`, reaching its folder beneath root without following a link.
bool RemoveCopy(int root_fd, const TierCopy& copy) {
  const int dir_fd =
      openat(root_fd, copy.dataset.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return false;
  const bool removed = unlinkat(dir_fd, copy.name.c_str(), 0) == 0;
  close(dir_fd);
  return removed;
}

TierLedger::TierLedger(int root_fd, int dir_fd, int ledger_fd, Bounds bounds,
                       std::function<void(const TierCopy&)> evicted)
    : root_fd_(root_fd),
      dir_fd_(dir_fd),
      ledger_fd_(ledger_fd),
      bounds_(std::move(bounds)),
      evicted_(std::move(evicted)) {}

TierLedger::~TierLedger() { close(ledger_fd_); }

bool TierLedger::Full() const {
  return full_.load(std::memory_order_relaxed) && !Fits(Used(), kFullProbe);
}

bool TierLedger::Fits(uint64_t used, uint64_t bytes, uint64_t slack) const {
  if (bounds_.max_bytes != 0 && used + bytes + slack > bounds_.max_bytes) return false;
  struct statvfs vfs {};
  if (fstatvfs(dir_fd_, &vfs) != 0) return false;
  return uint64_t{vfs.f_bavail} * vfs.f_frsize >= bounds_.keep_free + bytes + slack;
}

uint64_t TierLedger::Used() const {
  uint64_t used = 0;
  if (pread(ledger_fd_, &used, sizeof(used), 0) != sizeof(used)) used = 0;
  return used;
}

uint64_t TierLedger::OnDisk() const {
  const uint64_t used = Used();
  struct statvfs vfs {};
  const uint64_t free = fstatvfs(dir_fd_, &vfs) == 0 ? uint64_t{vfs.f_bavail} * vfs.f_frsize : 0;
  return used + free - std::min(free, bounds_.keep_free);
}

uint64_t TierLedger::Room() const {
  const uint64_t on_disk = OnDisk();
  return bounds_.max_bytes != 0 ? std::min(bounds_.max_bytes, on_disk) : on_disk;
}

// Under the ledger lock: the bytes in use as this daemon and the others left them, and
// what this daemon has reserved for copies not yet in the folder.
uint64_t TierLedger::Recount() { return ScanRoot(root_fd_, nullptr) + pending_; }

// Under the ledger lock: deletes the copies read least recently, of every dataset under
// root, until `bytes` more fit with room to spare (a twentieth of the bound, or sixteen
// such writes, but never more than a quarter of what is kept), so that the next writes
// do not count the folder again at once.
void TierLedger::EvictFor(uint64_t& used, uint64_t bytes) {
  std::vector<TierCopy> copies;
  used = ScanRoot(root_fd_, &copies) + pending_;
  std::sort(copies.begin(), copies.end(), ReadBefore);
  std::erase_if(copies, [this](const TierCopy& copy) {
    return copy.dataset == bounds_.dataset &&
           !ReadBefore(copy, TierCopy{{}, {}, 0, bounds_.opened});
  });
  const uint64_t spare = std::min(std::max(bounds_.max_bytes / 20, 16 * bytes), used / 4);
  for (const TierCopy& copy : copies) {
    if (Fits(used, bytes, spare)) break;
    if (!RemoveCopy(root_fd_, copy)) continue;
    used -= std::min(used, copy.bytes);
    evicted_(copy);
  }
}

bool TierLedger::Reserve(uint64_t bytes) {
  std::lock_guard lock(ledger_mu_);
  if (flock(ledger_fd_, LOCK_EX) != 0) return false;
  uint64_t used = 0;
  if (pread(ledger_fd_, &used, sizeof(used), 0) != sizeof(used)) used = Recount();
  if (!Fits(used, bytes)) {
    used = Recount();  // the ledger may count writers that died; the folder does not
    if (!Fits(used, bytes) && bounds_.evict) EvictFor(used, bytes);
  }
  const bool fits = Fits(used, bytes);
  if (fits) used += bytes;
  if (fits) pending_ += bytes;
  full_.store(!fits, std::memory_order_relaxed);
  [[maybe_unused]] ssize_t n = pwrite(ledger_fd_, &used, sizeof(used), 0);
  flock(ledger_fd_, LOCK_UN);
  return fits;
}

void TierLedger::Change(const std::function<void(uint64_t&)>& change) {
  std::lock_guard lock(ledger_mu_);
  const bool locked = flock(ledger_fd_, LOCK_EX) == 0;
  uint64_t used = 0;
  const bool read = locked && pread(ledger_fd_, &used, sizeof(used), 0) == sizeof(used);
  const uint64_t before = used;
  change(used);
  if (read && used != before) {  // a copy renamed into place leaves it as it was
    [[maybe_unused]] ssize_t n = pwrite(ledger_fd_, &used, sizeof(used), 0);
  }
  if (locked) flock(ledger_fd_, LOCK_UN);
}

}  // namespace gpufs
