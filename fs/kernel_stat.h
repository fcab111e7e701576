// What carries the kernel's requests: the transports' names (the choices of
// --fuse-transport and what the stats report), the keys under the stats' "kernel" object
// (Filesystem::KernelStats), and the series they export.
#pragma once

#include <array>
#include <string_view>

#include "source/figure.h"

namespace gpufs {

namespace fuse_transport_name {
inline constexpr std::string_view kAuto = "auto";         // io_uring where the kernel has it on
inline constexpr std::string_view kIoUring = "io_uring";  // io_uring, or refuse the mount
inline constexpr std::string_view kDevFuse = "dev_fuse";  // read/write on /dev/fuse
inline constexpr std::array<std::string_view, 3> kAll = {kAuto, kIoUring, kDevFuse};
}  // namespace fuse_transport_name

namespace kernel_stat {
inline constexpr const char* kTransport = "transport";         // io_uring, or dev_fuse (and why)
inline constexpr const char* kRingRequests = "ring_requests";  // over io_uring only
inline constexpr Figure kFigures[] = {
    {kRingRequests, "fuse_ring_requests_total", kCounter,
     "Requests the kernel handed over io_uring (FUSE over io_uring)."}};
}  // namespace kernel_stat

}  // namespace gpufs
