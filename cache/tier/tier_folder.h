// The disk tier's shared folder: what is under it, its ledger, and deleting a copy. Every
// folder is reached beneath root's descriptor without following a link; anything not named
// as the tier names its files is neither counted nor deleted.
#pragma once

#include <atomic>
#include <cstdint>
#include <ctime>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "base/private_files.h"

namespace gpufs {

inline constexpr const char* kTierTempPrefix = ".tmp-";  // a copy being written
inline constexpr const char* kTierCopySuffix = ".grp";   // a copy
inline constexpr const char* kTierLedger = ".ledger";    // the bytes every daemon counts

// One copy found by a count: where it is (a dataset folder under root, a name in it), how
// big, when it was last read.
struct TierCopy {
  std::string dataset;
  std::string name;
  uint64_t bytes = 0;
  timespec mtime{};
};

// True when `a` was read before `b` (eviction deletes the least recently read first).
bool ReadBefore(const TierCopy& a, const TierCopy& b);

// This daemon's temporary files' prefix: what it writes now, counted by its reservations
// rather than by the bytes written so far, which would count them twice.
std::string OwnTempPrefix();

// Every file under root's dataset folders (root open at `root_fd`): their bytes in all (but
// this daemon's writes in progress), and the copies among them. Temporary files of dead
// writers are deleted on the way.
uint64_t ScanRoot(int root_fd, std::vector<TierCopy>* copies);

// The disk cache's root and dataset folders: private to the user who mounts.
const FolderRole& TierRole();

// ROOT/.ledger, created 0600 exclusively or, when there, opened without following a link
// and checked to be ours. Returns the descriptor, or -1 with `why` set.
int OpenLedger(int root_fd, std::string& why);

// Deletes `copy`, reaching its folder beneath root without following a link.
bool RemoveCopy(int root_fd, const TierCopy& copy);

// The bytes that every daemon sharing the folder keeps under it, counted in ROOT/.ledger
// under an flock (the mutex serializes this daemon's threads, which share one open file and
// so one flock), and the eviction that makes room. The ledger is a count, not a truth: a
// writer that died leaves it high, so a write that does not fit counts the folder again
// before it evicts. Thread-safe.
class TierLedger {
 public:
  struct Bounds {
    uint64_t max_bytes = 0;  // on all files under root; 0: only keep_free bounds
    uint64_t keep_free = 0;  // bytes left free on root's filesystem
    bool evict = true;       // false: fill while there is room, then keep
    std::string dataset;     // this daemon's dataset folder under root
    // This dataset's copies read or written since then are not evicted for room.
    timespec opened{};
  };
  // `root_fd` and `dir_fd` (root/dataset) stay the caller's and must outlive the ledger;
  // `ledger_fd` (OpenLedger) becomes the ledger's. `evicted` is told of each copy deleted
  // for room, under the ledger's lock.
  TierLedger(int root_fd, int dir_fd, int ledger_fd, Bounds bounds,
             std::function<void(const TierCopy&)> evicted);
  ~TierLedger();
  TierLedger(const TierLedger&) = delete;
  TierLedger& operator=(const TierLedger&) = delete;

  // Reserves `bytes` for a copy not yet in the folder, evicting (when allowed) to make
  // room; false when there is none. A reservation ends with Unpend, inside a Change.
  bool Reserve(uint64_t bytes);
  // Under the lock: `change` may alter the folder and adjusts the bytes in use to match,
  // written back where the ledger could be read and they changed.
  void Change(const std::function<void(uint64_t&)>& change);
  // A reservation of `bytes` is over: its copy is in the folder now, or gone.
  void Unpend(uint64_t bytes) { pending_ -= bytes; }
  // Whether `bytes` more, and `slack` besides, fit the bound and leave keep_free free.
  bool Fits(uint64_t used, uint64_t bytes, uint64_t slack = 0) const;
  // Whether the last reservation failed and there is still no room for about a group.
  bool Full() const;
  uint64_t Used() const;  // as the ledger has it
  // The bytes copies could reach with no bound: what is used, and the free space less the
  // reserve; and the same within the bound.
  uint64_t OnDisk() const;
  uint64_t Room() const;
  uint64_t keep_free() const { return bounds_.keep_free; }

 private:
  uint64_t Recount();
  void EvictFor(uint64_t& used, uint64_t bytes);

  // What Full() asks room for: about a group, so that room made by a deletion is seen.
  static constexpr uint64_t kFullProbe = 16 << 20;
  const int root_fd_;
  const int dir_fd_;
  const int ledger_fd_;
  const Bounds bounds_;
  const std::function<void(const TierCopy&)> evicted_;
  // Bytes reserved by this daemon for copies not yet renamed into the folder (claimed, or
  // being written): a count of the folder does not see them.
  std::atomic<uint64_t> pending_{0};
  std::atomic<bool> full_{false};  // see Full()
  // Lock order: ledger_mu_, then the flock on ledger_fd_.
  std::mutex ledger_mu_;
};

}  // namespace gpufs
