// Where a mount goes and how it leaves. Nothing is hidden or left behind silently: a folder
// with files in it is refused unless asked for (they would vanish under the mount); a gpufs
// mount whose daemon has died is cleared, since it only answers "Transport endpoint is not
// connected" and a new mount stacked over it would leave it behind; a live mount is never
// stacked over; and an unmount refused because the mount is in use names who holds it.
#pragma once

#include <string>

#include "base/error.h"

namespace gpufs {

// Checks that `path` may take a new mount: an existing folder, not a live mount, empty
// unless `allow_non_empty`. A dead gpufs mount there is unmounted first (logged); a dead
// mount of another kind is refused naming the fix.
Status PrepareMountpoint(const std::string& path, bool allow_non_empty);

// Why the kernel mount may have failed, and the fix, from what this process can see: no
// /dev/fuse (a container started without it), or, for a user other than root, no
// fusermount3 that is setuid root. Empty when none of these is the case.
std::string FuseAccessHint();

// What `gpufsd unmount` does with a mount that is in use.
enum class InUse {
  kRefuse,  // fail, naming the processes that hold it
  kDetach,  // --lazy: detach it now; it goes, with its daemon, when they let go
  kForce,   // --force: cut its connection (they get errors), detach it, its daemon exits
};

// `gpufsd unmount [--lazy|--force] MNT`: unmounts the gpufs mount at `mountpoint` and waits
// for its daemon to exit; a mount whose daemon is gone is cleared. In use, as `in_use`
// says. The process exit status.
int RunUnmount(const std::string& mountpoint, InUse in_use);

}  // namespace gpufs
