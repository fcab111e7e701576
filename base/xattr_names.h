// The extended attributes a mount answers, spelled here once for the daemon, gpufs-stat, the
// mount helper's tools and the GPU client: a file's say where its bytes lie; the root's name
// the daemon behind the mount and how to ask it.
#pragma once

#include <array>
#include <string_view>

namespace gpufs::xattr {

// A file's.
inline constexpr const char* kGroup = "user.gpufs.group";    // its group's number
inline constexpr const char* kBlob = "user.gpufs.blob";      // the blob, as the source names it
inline constexpr const char* kOffset = "user.gpufs.offset";  // where it starts in the blob
inline constexpr const char* kSize = "user.gpufs.size";
inline constexpr const char* kClass = "user.gpufs.class";  // its class folder's name

// The root's.
inline constexpr const char* kPid = "user.gpufs.pid";  // the daemon's
inline constexpr const char* kSource = "user.gpufs.source";
inline constexpr const char* kFormat = "user.gpufs.format";
inline constexpr const char* kInodes = "user.gpufs.inodes";    // references the kernel holds
inline constexpr const char* kStats = "user.gpufs.stats";      // the cache's and source's, JSON
inline constexpr const char* kControl = "user.gpufs.control";  // the control socket's path

// What listxattr answers, in this order (the control socket's only when there is one).
inline constexpr std::array<std::string_view, 5> kFileNames = {kGroup, kBlob, kOffset, kSize,
                                                               kClass};
inline constexpr std::array<std::string_view, 5> kRootNames = {kPid, kSource, kFormat, kInodes,
                                                               kStats};

}  // namespace gpufs::xattr
