// The keys of what carries the kernel's requests, under the stats' "kernel" object
// (Filesystem::KernelStats), and the series they export.
#pragma once

#include "source/figure.h"

namespace gpufs {

namespace kernel_stat {
inline constexpr const char* kTransport = "transport";         // io_uring, or dev_fuse (and why)
inline constexpr const char* kRingRequests = "ring_requests";  // over io_uring only
inline constexpr Figure kFigures[] = {
    {kRingRequests, "fuse_ring_requests_total", kCounter,
     "Requests the kernel handed over io_uring (FUSE over io_uring)."}};
}  // namespace kernel_stat

}  // namespace gpufs
