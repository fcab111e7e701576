// Whole-file reads and crash-safe whole-file writes, shared by the format readers and
// writers.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "base/error.h"

namespace gpufs {

// The bytes of the file at `path`, opened without following a link at its last step.
Result<std::string> ReadWholeFile(const std::filesystem::path& path);

// Writes all of `bytes` at the current position of `fd`; `path` names it in errors.
Status WriteAll(int fd, std::string_view bytes, const std::filesystem::path& path);

// Opens `name`, one path segment, in the folder open at `dir_fd` such that neither the
// name nor a symbolic link on its way leads out of that folder: a dataset names its blobs,
// and must not be able to name /etc/shadow through a link. Uses openat2's
// RESOLVE_BENEATH; where the kernel has no openat2, a symbolic link is refused outright.
// Returns the descriptor, or -1 with errno set (EXDEV or ELOOP: it leads outside).
int OpenBeneath(int dir_fd, const std::string& name, int flags);

// The stat of `name` as OpenBeneath resolves it (without opening it for reading, so a
// fifo cannot block). On failure the message is the reason alone, for the caller to put
// in context; a name leading outside the folder is EINVAL.
Result<struct stat> StatBeneath(int dir_fd, const std::string& name);

// fsync of a folder, so that a rename or create in it survives a crash.
Status SyncFolder(const std::filesystem::path& folder);

}  // namespace gpufs
