// The daemon's life around its session: detaching from the terminal that started it
// (the parent returns once the mount serves), telling readiness, and what can only be set
// once the kernel has answered INIT.
#pragma once

#include <string>

namespace gpufs {

// Raises the mount's kernel read-ahead to `kib` (0: leave it) through its bdi in sysfs:
// the kernel caps it at 128 KiB during INIT, and only root may write the knob.
void RaiseReadahead(const std::string& mountpoint, unsigned kib);

// Writes "ready" to `fd` and closes it; nothing for -1.
void SignalReady(int fd);

// Forks; the parent waits until the child reports the mount usable, then exits with
// status 0, or with 1 when the child died first. Returns the write end in the child
// (-1 on failure, errno set).
int Detach();

// Points stdin, stdout and stderr at /dev/null, once the mount is ready.
void DropTerminal();

}  // namespace gpufs
