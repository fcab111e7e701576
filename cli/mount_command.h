// `gpufsd mount` and `gpufsd unmount`: wiring of the dataset, the filesystem core and a
// FUSE session, plus the daemon's life cycle (detach, readiness, clean unmount).
#pragma once

#include "cli/options/mount_options.h"

namespace gpufs {

// Returns the process exit status.
int RunMount(const MountArgs& args);

}  // namespace gpufs
