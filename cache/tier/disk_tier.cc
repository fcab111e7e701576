#include "cache/tier/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/private_files.h"
#include "cache/tier/tier_copy.h"
#include "cache/tier/tier_folder.h"
#include "dataset/format/checksums.h"

namespace gpufs {

static_assert(DiskTier::kAlign == kCopyAlign);

namespace {

// What Full() asks room for: about a group, so that room made by a deletion is seen.
constexpr uint64_t kFullProbe = 16 << 20;

void LogTightened(const std::string& note) {
  if (!note.empty()) spdlog::warn("{}", note);
}

}  // namespace

struct DiskTier::OpenedCopy {
  int fd = -1;
  CopyHeader header;
  OpenedCopy(int fd, CopyHeader header) : fd(fd), header(std::move(header)) {}
  ~OpenedCopy() { close(fd); }
  OpenedCopy(const OpenedCopy&) = delete;
  OpenedCopy& operator=(const OpenedCopy&) = delete;
};

namespace {

// A second early: file times come from a coarse clock, and a copy written just after
// Open may carry a time a few milliseconds before it.
timespec OpenedTime() {
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  now.tv_sec -= 1;
  return now;
}

// A buffer of each reading thread, aligned for O_DIRECT, grown as needed and kept: slice
// reads allocate nothing and zero nothing.
char* SliceBuffer(size_t bytes) {
  thread_local AlignedBuffer buffer;
  thread_local size_t capacity = 0;
  if (capacity < bytes) {
    capacity = RoundUp(std::max<size_t>(bytes, 1 << 20), DiskTier::kAlign);
    buffer = Aligned(capacity);
    if (!buffer) capacity = 0;
  }
  return buffer.get();
}

}  // namespace

Result<std::unique_ptr<DiskTier>> DiskTier::Open(DiskTierOptions options) {
  auto root = OpenPrivateFolder(options.root, TierRole());
  if (!root) return root.error();
  LogTightened(root->note);
  auto dir = OpenPrivateFolderAt(root->fd.get(), options.dataset, options.root / options.dataset,
                                 TierRole());
  if (!dir) return dir.error();
  LogTightened(dir->note);
  std::string why;
  const int ledger_fd = OpenLedger(root->fd.get(), why);
  if (ledger_fd < 0) {
    return Fail(EPERM, "cannot use disk cache {}: cannot open {}: {}", options.root.string(),
                (options.root / kTierLedger).string(), why);
  }
  const int dir_fd = dir->fd.release();
  uint64_t keep_free = 0;
  if (options.keep_free) {
    keep_free = *options.keep_free;
  } else if (struct statvfs vfs{}; fstatvfs(dir_fd, &vfs) == 0) {
    keep_free = DefaultKeepFree(uint64_t{vfs.f_blocks} * vfs.f_frsize);
  }
  return std::unique_ptr<DiskTier>(
      new DiskTier(std::move(options), keep_free, root->fd.release(), dir_fd, ledger_fd));
}

uint64_t DiskTier::DefaultKeepFree(uint64_t total_bytes) {
  return std::min<uint64_t>(total_bytes / 10, 10ULL << 30);
}

DiskTier::DiskTier(DiskTierOptions options, uint64_t keep_free, int root_fd, int dir_fd,
                   int ledger_fd)
    : options_(std::move(options)),
      dir_(options_.root / options_.dataset),
      root_fd_(root_fd),
      dir_fd_(dir_fd),
      opened_(OpenedTime()),
      ledger_(root_fd, dir_fd, ledger_fd,
              TierLedger::Bounds{options_.max_bytes, keep_free, options_.evict, options_.dataset,
                                 opened_},
              [this](const TierCopy& copy) {
                if (copy.dataset == options_.dataset) Forget(copy.name);  // its space, freed now
                ++counters_.evictions;
              }) {}

DiskTier::~DiskTier() {
  close(root_fd_);
  close(dir_fd_);
}

int DiskTier::OpenCopy(const std::string& name) {
  for (;;) {
    const bool direct = direct_;
    const int fd =
        openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (direct ? O_DIRECT : 0));
    if (fd >= 0) return fd;
    if (!(direct && errno == EINVAL)) break;
    direct_ = false;  // a filesystem without O_DIRECT (tmpfs before 6.6)
  }
  ++counters_.misses;
  return -1;
}

bool DiskTier::ReadWhole(const std::string& name, char* buffer, size_t length) {
  if (!enabled_ || name.empty()) return false;
  const int fd = OpenCopy(name);
  if (fd < 0) return false;
  auto header = ReadCopyHeader(fd, name, length);
  std::string damage = header ? "" : header.error().message;
  if (header && ReadFully(fd, buffer, RoundUp(length, kAlign), header->header_bytes) <
                    static_cast<ssize_t>(length)) {
    damage = "it ends early";
  }
  for (size_t b = 0; header && damage.empty() && b < header->blocks.size(); ++b) {
    if (BlockChecksum(buffer, length, b, header->block_bytes) != header->blocks[b]) {
      damage = fmt::format("block {} does not match its checksum", b);
    }
  }
  if (damage.empty()) futimens(fd, nullptr);  // read now: the last to be evicted
  return Settle(fd, name, damage, counters_.hits, length);
}

std::shared_ptr<const DiskTier::OpenedCopy> DiskTier::Opened(const std::string& name) {
  {
    std::lock_guard lock(open_mu_);
    if (auto it = open_.find(name); it != open_.end()) {
      it->second.used = ++open_clock_;
      return it->second.copy;
    }
  }
  const int fd = OpenCopy(name);
  if (fd < 0) return nullptr;
  auto header = ReadCopyHeader(fd, name, 0);
  if (!header) {
    close(fd);
    Damaged(name, header.error().message);
    return nullptr;
  }
  auto copy = std::make_shared<const OpenedCopy>(fd, std::move(*header));
  std::lock_guard lock(open_mu_);
  if (open_.size() >= kOpenCopies) {
    auto oldest = std::min_element(open_.begin(), open_.end(), [](const auto& a, const auto& b) {
      return a.second.used < b.second.used;
    });
    open_.erase(oldest);  // closed once its last reader lets go
  }
  open_[name] = OpenEntry{copy, ++open_clock_};
  return copy;
}

void DiskTier::Forget(const std::string& name) {
  std::lock_guard lock(open_mu_);
  open_.erase(name);
}

// One read where the copy is open already: the checked blocks that hold the slice, into a
// buffer of the thread's, checked, then copied out.
bool DiskTier::ReadSlice(const std::string& name, uint64_t offset, size_t size, char* out) {
  if (!enabled_ || name.empty()) return false;
  const auto copy = Opened(name);
  if (!copy) return false;
  const CopyHeader& header = copy->header;
  std::string damage;
  if (offset + size > header.payload) damage = "it is shorter than the group";
  if (damage.empty() && size > 0) {
    const size_t block = header.block_bytes;
    const size_t first = offset / block;
    const size_t last = (offset + size - 1) / block;
    const uint64_t start = uint64_t{first} * block;
    const size_t span =
        std::min<uint64_t>((last + 1) * block, RoundUp(header.payload, kAlign)) - start;
    char* blocks = SliceBuffer(span);
    const uint64_t have = std::min<uint64_t>(span, header.payload - start);
    if (!blocks) return false;
    if (ReadFully(copy->fd, blocks, span, header.header_bytes + start) <
        static_cast<ssize_t>(have)) {
      damage = "it ends early";
    }
    for (size_t b = first; damage.empty() && b <= last; ++b) {
      const uint64_t at = uint64_t{b} * block - start;
      const uint64_t n = std::min<uint64_t>(block, header.payload - uint64_t{b} * block);
      if (ChecksumOf(blocks + at, n) != header.blocks[b]) {
        damage = fmt::format("block {} does not match its checksum", b);
      }
    }
    if (damage.empty()) std::memcpy(out, blocks + (offset - start), size);
  }
  if (!damage.empty()) {
    Damaged(name, damage);
    return false;
  }
  ++counters_.slice_hits;
  counters_.read_bytes += size;
  return true;
}

bool DiskTier::Settle(int fd, const std::string& name, const std::string& damage,
                      std::atomic<uint64_t>& hits, uint64_t bytes) {
  close(fd);
  if (!damage.empty()) {
    Damaged(name, damage);
    return false;
  }
  ++hits;
  counters_.read_bytes += bytes;
  return true;
}

void DiskTier::Delete(const std::string& name) {
  Forget(name);
  // Unlinked with the ledger locked: a count of the folder in between would already leave
  // the copy out, and the release would then take its bytes off twice.
  ledger_.Change([&](uint64_t& used) {
    struct stat st {};
    if (fstatat(dir_fd_, name.c_str(), &st, 0) == 0 && unlinkat(dir_fd_, name.c_str(), 0) == 0) {
      used -= std::min(used, static_cast<uint64_t>(st.st_size));
    }
  });
}

void DiskTier::Reject(const std::string& name, std::string_view why) {
  Delete(name);
  ++counters_.hash_mismatches;
  spdlog::warn(
      "disk cache copy {} is not the dataset's ({}): deleted; the group is read from the source",
      (dir_ / name).string(), why);
}

void DiskTier::Damaged(const std::string& name, std::string_view why) {
  Delete(name);
  ++counters_.damaged;
  spdlog::warn("disk cache copy {} is damaged ({}): deleted; the group is read from the source",
               (dir_ / name).string(), why);
}

uint64_t DiskTier::FileBytes(const std::string& name, size_t length) const {
  return HeaderBytes(name.size(), length, options_.block_bytes) + RoundUp(length, kAlign);
}

bool DiskTier::Claim(const std::string& name, size_t length) {
  if (!enabled_ || name.empty()) return false;
  if (ledger_.Reserve(FileBytes(name, length))) return true;
  ++counters_.skipped;
  return false;
}

// The reservation is dropped and its bytes taken off the ledger at once: a count of the
// folder in between would already leave them out, and they would be taken off twice.
void DiskTier::Unclaim(const std::string& name, size_t length) {
  const uint64_t bytes = FileBytes(name, length);
  ledger_.Change([&](uint64_t& used) {
    ledger_.Unpend(bytes);
    used -= std::min(used, bytes);
  });
}

bool DiskTier::Write(const std::string& name, const char* bytes, size_t length, bool claimed) {
  if (!enabled_ || name.empty()) {
    if (claimed) Unclaim(name, length);
    return false;
  }
  const size_t header_bytes = HeaderBytes(name.size(), length, options_.block_bytes);
  AlignedBuffer header = MakeCopyHeader(name, bytes, length, options_.block_bytes);
  const uint64_t file_bytes = FileBytes(name, length);
  if (!claimed && !ledger_.Reserve(file_bytes)) {
    ++counters_.skipped;
    return false;
  }
  const std::string temp = fmt::format("{}{}", OwnTempPrefix(), temp_counter_++);
  int fd = -1;
  for (;;) {
    const bool direct = direct_;
    fd = openat(dir_fd_, temp.c_str(),
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | (direct ? O_DIRECT : 0),
                0600);
    if (fd >= 0 || !(direct && errno == EINVAL)) break;
    direct_ = false;
  }
  const bool written = fd >= 0 && WriteFully(fd, header.get(), header_bytes, 0) &&
                       WriteFully(fd, bytes, RoundUp(length, kAlign), header_bytes);
  const int error = errno;
  if (fd >= 0 && !direct_) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (fd >= 0) close(fd);
  // With the ledger locked, a count of the folder finds this copy either reserved or in the
  // folder, and a reservation given up leaves the ledger with the count that included it.
  // A name appears only with every byte behind it; a copy another daemon put there first
  // is as good as ours.
  bool renamed = false;
  int rename_error = 0;
  ledger_.Change([&](uint64_t& used) {
    renamed = written && syscall(SYS_renameat2, dir_fd_, temp.c_str(), dir_fd_, name.c_str(),
                                 1 /* RENAME_NOREPLACE */) == 0;
    rename_error = errno;
    ledger_.Unpend(file_bytes);  // in the folder now, or gone
    if (renamed) return;
    unlinkat(dir_fd_, temp.c_str(), 0);
    used -= std::min(used, file_bytes);
  });
  if (renamed) {
    ++counters_.writes;
    counters_.write_bytes += length;
    return true;
  }
  if (written && rename_error == EEXIST) return true;
  WriteFailed(fd < 0 ? temp : name, written ? rename_error : error);
  return false;
}

void DiskTier::WriteFailed(const std::string& what, int error) {
  const uint64_t failures = ++counters_.write_errors;
  struct stat st {};
  if (error == ENOENT && fstat(dir_fd_, &st) == 0 && st.st_nlink == 0) {
    if (enabled_.exchange(false)) {
      spdlog::warn("disk cache off: {} was removed; groups are read from the source",
                   dir_.string());
    }
    return;
  }
  // A full or failing disk would log once a group; once in a while is enough to see it.
  if (failures == 1 || failures % 1000 == 0) {
    spdlog::warn(
        "disk cache cannot keep {}: {} ({} such failures); the group is read from the "
        "source",
        (dir_ / what).string(), strerror(error), failures);
  }
}

bool DiskTier::Full() const { return ledger_.Full(); }
uint64_t DiskTier::Room() const { return ledger_.Room(); }
uint64_t DiskTier::OnDisk() const { return ledger_.OnDisk(); }

bool DiskTier::Present(const std::string& name) const {
  return enabled_ && !name.empty() && faccessat(dir_fd_, name.c_str(), F_OK, 0) == 0;
}

nlohmann::json DiskTier::Stats() const {
  nlohmann::json j{{tier_stat::kRoot, options_.root.string()},
                   {tier_stat::kEnabled, enabled_.load()},
                   {tier_stat::kBound, options_.max_bytes},
                   {tier_stat::kKeepFree, ledger_.keep_free()},
                   {tier_stat::kUsed, ledger_.Used()}};
  PutCounts(j, tier_stat::kCounterFigures, counters_);
  return j;
}

std::string TierFileName(uint32_t group, std::string_view blob, std::string_view identity,
                         uint64_t offset, uint64_t length) {
  if (identity.empty()) return {};
  const std::string key =
      fmt::format("v{}\n{}\n{}\n{}\n{}", kCopyVersion, blob, identity, offset, length);
  return fmt::format("g{:06}-{:016x}{}", group, ChecksumOf(key.data(), key.size()),
                     kTierCopySuffix);
}

std::string TierDatasetFolder(std::string_view label) {
  std::string_view tail = label;
  while (tail.size() > 1 && tail.back() == '/') tail.remove_suffix(1);
  if (const size_t slash = tail.rfind('/'); slash != std::string_view::npos) {
    tail.remove_prefix(slash + 1);
  }
  std::string readable;
  for (char c : tail.substr(0, 40))
    readable +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ? c : '_';
  return fmt::format("{}-{:016x}", readable.empty() ? "dataset" : readable,
                     ChecksumOf(label.data(), label.size()));
}

}  // namespace gpufs
