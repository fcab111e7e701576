// Whether a folder lies on a network filesystem, where the default disk tier should not go:
// on clusters the home folder (and so ~/.cache) is often NFS or Lustre with a quota, where a
// tier is slower than the store it stands in for and fills the user's quota.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace gpufs {

inline constexpr uint64_t kFuseMagic = 0x65735546;  // FUSE_SUPER_MAGIC, linux/magic.h

// The name of a network filesystem (or FUSE, which may be one: s3fs, sshfs) by its statfs
// f_type; nullopt for a local one. A pure function of the number.
std::optional<std::string_view> NetworkFilesystemName(uint64_t f_type);

// Whether a dataset on the filesystem of `f_type` is slower to read than a local disk, so
// that a disk tier pays by default: a kernel network filesystem (NFS, Lustre, ...). FUSE
// is not among them: it may as well be local (squashfuse), and says nothing of its speed.
bool SlowerThanLocalDisk(uint64_t f_type);

// The f_type of the filesystem that holds `path`, or of its nearest existing ancestor when
// it does not exist yet; nullopt when none can be asked.
std::optional<uint64_t> FilesystemTypeOf(const std::filesystem::path& path);

}  // namespace gpufs
