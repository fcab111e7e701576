// The disk tier's shared folder: what is under it, its ledger, and deleting a copy. Every
// folder is reached beneath root's descriptor without following a link; anything not named
// as the tier names its files is neither counted nor deleted.
#pragma once

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "dataset/format/private_files.h"

namespace gpufs {

inline constexpr const char* kTempPrefix = ".tmp-";  // a copy being written
inline constexpr const char* kSuffix = ".grp";       // a copy
inline constexpr const char* kLedger = ".ledger";    // the bytes every daemon counts

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

}  // namespace gpufs
