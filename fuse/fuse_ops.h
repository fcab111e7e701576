// The FUSE low-level adapter: each callback decodes its request, calls one Filesystem
// method and replies exactly once. All state lives in the Filesystem and in FuseContext;
// no lock is held here, so no reply is ever sent under a lock.
#pragma once

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>

#include "fs/filesystem.h"

namespace gpufs {

class UringTransport;

// Whether listings carry each entry's attributes (READDIRPLUS). Always: a listing makes a
// kernel inode of every name (about 5 us each), which a plain walk of millions of files
// pays for nothing. Auto (the kernel's adaptive mode): the first part of a listing comes
// with attributes, the rest only once names of that folder are being looked up, so a walk
// stays cheap and the first open of each file pays one LOOKUP instead.
enum class DirPlus { kAuto, kAlways, kNever };
inline constexpr std::array<std::string_view, 3> kDirPlusNames = {"auto", "always", "never"};
inline std::string_view DirPlusName(DirPlus mode) { return kDirPlusNames[static_cast<int>(mode)]; }
std::optional<DirPlus> ParseDirPlus(std::string_view name);

// How hard the kernel may cache, and how much it may ask at once. The data never changes,
// so the defaults cache as much as the kernel allows; each knob exists so its effect can be
// measured.
struct CachePolicy {
  double entry_timeout_s = 86400;  // names, including negative lookups
  double attr_timeout_s = 86400;
  bool keep_cache = true;  // keep page cache across opens
  DirPlus readdirplus = DirPlus::kAuto;
  bool no_open = true;  // open/opendir answered once with ENOSYS, then never sent
  // Streaming: files are opened with FOPEN_DIRECT_IO, so reads bypass the kernel's page
  // cache and each is served from the group cache. For a dataset larger than the cache
  // budget, whose bytes would otherwise be kept twice (page cache and pinned memory).
  // Opens of files are then answered (one round trip each).
  bool direct_io = false;
  // The kernel's background requests (read-ahead reads) in flight at once, and the count
  // at which it stops issuing more read-ahead; 0: the kernel's defaults (12 and 9).
  unsigned max_background = 0;
  unsigned congestion_threshold = 0;
};

// The userdata of a session. Owned by the caller of fuse_session_new; outlives the session.
struct FuseContext {
  Filesystem* fs = nullptr;
  CachePolicy cache;
  std::function<void()> on_init;        // called while answering INIT; later requests wait for it
  UringTransport* transport = nullptr;  // set where FUSE over io_uring may carry requests
};

const struct fuse_lowlevel_ops& FuseOperations();

}  // namespace gpufs
