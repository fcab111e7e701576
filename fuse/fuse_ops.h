// The FUSE low-level adapter: each callback decodes its request, calls one Filesystem
// method and replies exactly once. All state lives in the Filesystem and in FuseContext;
// no lock is held here, so no reply is ever sent under a lock.
#pragma once

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "fs/filesystem.h"

namespace gpufs {

// How hard the kernel may cache. The data never changes, so the defaults cache as much as
// the kernel allows; each knob exists so its effect can be measured.
struct CachePolicy {
  double entry_timeout_s = 86400;  // names, including negative lookups
  double attr_timeout_s = 86400;
  bool keep_cache = true;   // keep page cache across opens
  bool readdirplus = true;  // attributes come with listings: no lookup per file
  bool no_open = true;      // open/opendir answered once with ENOSYS, then never sent
};

// The userdata of a session. Owned by the caller of fuse_session_new; outlives the session.
struct FuseContext {
  Filesystem* fs = nullptr;
  CachePolicy cache;
  std::function<void()> on_init;  // called while answering INIT; later requests wait for it
};

const struct fuse_lowlevel_ops& FuseOperations();

}  // namespace gpufs
