// The disk tier: copies of groups in files on a local disk, under the pinned tier. A
// dataset larger than memory is read from the source once; later epochs, remounts and a
// second job on the node read it back with large local reads.
//
// - Layout: ROOT/<dataset>/g<group>-<key>.grp. The key hashes the blob's name, its
//   identity (ETag, checksum, size and time: BlobSource::Identity) and the byte range, so
//   a changed dataset gets new names and never reads an old copy; old files age out by
//   eviction. ROOT/.ledger holds the bytes in use by every daemon sharing ROOT.
// - Private: ROOT belongs to one user. It and the dataset folders are 0700, the files 0600,
//   and a ROOT of another uid, or one others may write into, is refused: a copy another user
//   could read leaks the dataset, and one they could plant would be served. Everything
//   beneath ROOT is reached from its descriptor without following links.
// - A file is a header (magic, version, payload length, its own name and the XXH3-64 of
//   each block of the payload, 16 KiB: kBlock), padded to 4 KiB, then the payload, padded to
//   4 KiB. The blocks let one member be read and checked without reading its group.
// - Crash safety: a file is written under a temporary name and renamed into place, so a
//   name never shows a half-written group. A crash can still leave a renamed file whose
//   blocks never reached the disk: every read checks the blocks it returns, and a damaged
//   file is deleted, logged and read from the source again.
// - Shared: daemons of one user on a node share ROOT. Each writes whole files under names of its
//   own; the ledger, changed under flock, lets them keep the size bound together. When a
//   write would pass the bound, or leave the disk with less than `keep_free`, the truth
//   is counted again from the folder (with the room this daemon has reserved for copies
//   not written yet) and the files read least recently (mtime, touched on each whole
//   read) are deleted, except this dataset's copies written or read since this daemon
//   opened the tier: in a random epoch, evicting the oldest copy to admit each new group
//   leaves the next epoch nothing (every group is evicted before it comes round again),
//   while keeping what is there serves tier/dataset of every epoch. A write that finds no
//   room is skipped, and Full() tells the cache to stop fetching groups for the tier.
// - Room is claimed before a group's bytes are fetched for the tier (Claim), so a tier
//   that fills up stops the fetches at once rather than after they arrive.
// - Member reads: copies are kept open (an LRU of descriptors with their headers and
//   check tables), so a member read alone is one read of the 16 KiB blocks that hold it,
//   into a buffer of the reading thread's, checked against their sums.
// - Faults never reach a reader: a full disk, a write error or a vanished folder only
//   means a group is not kept (a vanished folder turns the tier off, with a log line).
//
// Reads and writes bypass the kernel's page cache (O_DIRECT where the filesystem has it):
// the page cache is left to the served files, and a 16 MiB read goes to the device whole.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cache/tier/tier_folder.h"
#include "cache/tier/tier_stat.h"

namespace gpufs {

struct DiskTierOptions {
  std::filesystem::path root;  // shared by every dataset and daemon that names it
  std::string dataset;         // this dataset's folder under root
  uint64_t max_bytes = 0;      // bound on all files under root; 0: only keep_free bounds
  // Bytes to leave free on root's filesystem; by default a tenth of it, at most 10 GiB.
  std::optional<uint64_t> keep_free;
  bool evict = true;  // false: fill while there is room, then keep (the pin policy)
  // The checked block of the copies written (DiskTier::kBlock; a power of two, 4 KiB to
  // 1 MiB). Copies are read with the block their header names, whatever this is.
  size_t block_bytes = 16 << 10;
};

// A file store keyed by name; the group cache decides the names. Thread-safe.
class DiskTier {
 public:
  static constexpr size_t kAlign = 4096;
  // Checked blocks of new copies: a member read alone reads and checks the blocks that
  // hold it, so a smaller block reads less past its ends (a 128 KiB member: 1.1 times its
  // bytes with 16 KiB blocks, 1.5 times with 64 KiB ones). Copies written with another
  // block size (their header says which) are read as written.
  static constexpr size_t kBlock = 16 << 10;

  // Creates root/dataset as needed (0700); fails, naming the folder and the fix, when it
  // cannot be used or is not private to this user (see private_files.h).
  static Result<std::unique_ptr<DiskTier>> Open(DiskTierOptions options);
  // What a tier leaves free on a disk of `total_bytes` unless told (a tenth, at most 10 GiB).
  static uint64_t DefaultKeepFree(uint64_t total_bytes);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // The whole payload of `name` (which must be `length` bytes) into `buffer`, aligned to
  // kAlign with room for length rounded up to kAlign. True on a checked copy.
  bool ReadWhole(const std::string& name, char* buffer, size_t length);
  // Bytes [offset, offset + size) of the payload of `name`, checked, into `out`.
  bool ReadSlice(const std::string& name, uint64_t offset, size_t size, char* out);
  // Keeps `length` bytes at `bytes` (aligned to kAlign, readable up to length rounded up
  // to kAlign) as `name`. False when not kept (no room, an error, the tier off).
  // `claimed`: the room was taken by Claim beforehand (and is given back on a failure).
  bool Write(const std::string& name, const char* bytes, size_t length, bool claimed = false);
  // Takes the room a copy of `length` bytes named `name` will need, evicting as Write
  // does, before its bytes are fetched; false (counted as skipped) when there is none.
  // The room is used by Write(..., claimed = true) or given back by Unclaim.
  bool Claim(const std::string& name, size_t length);
  void Unclaim(const std::string& name, size_t length);
  // Deletes the copy `name`, whose bytes were read back intact but are not the dataset's
  // (they do not match the index's SHA-256: planted by whoever could write the folder);
  // counts and logs it, naming `why`.
  void Reject(const std::string& name, std::string_view why);
  // Whether `name` is on disk now (any daemon's copy).
  bool Present(const std::string& name) const;
  // Whether the last write found no room it could make (nothing left to evict but this
  // dataset's copies kept since Open), and there is still none: a copy written now would
  // not be kept. Cheap (the ledger and a statfs).
  bool Full() const;
  bool enabled() const { return enabled_; }
  // The bytes all daemons' copies may reach, by the rule Write keeps: the bound, and the
  // free space less the reserve, whichever is less.
  uint64_t Room() const;
  // The bytes copies could reach with no bound: what is used, and the free space less
  // the reserve.
  uint64_t OnDisk() const;
  nlohmann::json Stats() const;
  // Bytes read back from copies since the mount (the stall account's fetched bytes).
  uint64_t read_bytes() const { return counters_.read_bytes.load(std::memory_order_relaxed); }

 private:
  struct OpenedCopy;  // a descriptor of a copy and its header, cached for slice reads

  DiskTier(DiskTierOptions options, uint64_t keep_free, int root_fd, int dir_fd, int ledger_fd);
  // A descriptor of `name`'s copy, or -1 (a miss, counted).
  int OpenCopy(const std::string& name);
  // Closes `fd` and settles a read of `name`: a damaged copy is deleted and logged, a good
  // read counted in `hits`.
  bool Settle(int fd, const std::string& name, const std::string& damage,
              std::atomic<uint64_t>& hits, uint64_t bytes);
  // `name`'s copy opened with its header read, from the cache of open copies or opened now
  // (and cached); null on a miss or a damaged header (deleted).
  std::shared_ptr<const OpenedCopy> Opened(const std::string& name);
  void Forget(const std::string& name);
  void Damaged(const std::string& name, std::string_view why);
  void Delete(const std::string& name);
  uint64_t FileBytes(const std::string& name, size_t length) const;
  void WriteFailed(const std::string& what, int error);

  const DiskTierOptions options_;
  const std::filesystem::path dir_;  // root/dataset
  const int root_fd_;                // checked private; all else is reached beneath it
  const int dir_fd_;
  std::atomic<bool> enabled_{true};
  std::atomic<bool> direct_{true};  // O_DIRECT works on this filesystem
  std::atomic<uint64_t> temp_counter_{0};
  // Copies of this dataset read or written since this time are not evicted for room: in
  // a random epoch a full tier that evicts to admit each new group would hold, at the next
  // epoch, the groups read last, which are as likely to come late as any (no hits); one
  // that keeps what it has serves its share of every epoch.
  const timespec opened_;
  mutable tier_stat::Counters counters_;
  // Open copies for slice reads, the least recently used closed past kOpenCopies; a copy
  // this daemon deletes is forgotten (one another daemon deletes still reads its own
  // bytes, names key the bytes, and holds its space until it is closed). Guarded by
  // open_mu_, taken alone or inside the ledger's lock (ledger_, when it evicts).
  static constexpr size_t kOpenCopies = 256;
  struct OpenEntry {
    std::shared_ptr<const OpenedCopy> copy;
    uint64_t used = 0;
  };
  std::mutex open_mu_;
  std::unordered_map<std::string, OpenEntry> open_;  // guarded by open_mu_
  uint64_t open_clock_ = 0;                          // guarded by open_mu_
  // The folder's bytes and eviction; its lock is taken before open_mu_. Last: its eviction
  // callback uses what is above.
  TierLedger ledger_;
};

// The file name of a group's copy: group id for people, a hash of what identifies the
// bytes for the tier. Empty when `identity` is (nothing known of the blob: not kept).
std::string TierFileName(uint32_t group, std::string_view blob, std::string_view identity,
                         uint64_t offset, uint64_t length);

// A folder name for a dataset at `label` (its path or URL): readable, and unique.
std::string TierDatasetFolder(std::string_view label);

}  // namespace gpufs
