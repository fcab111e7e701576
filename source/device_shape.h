// What the device under a local dataset shows of its cost: what one request costs against
// what one byte costs. The group cache weighs with it whether a file whose group is not
// pinned is read alone (one small request) or with its whole group (one large read that
// the kernel's page cache keeps for the group's other files, cache/miss_reads.h).
//
// Read from what the system says, never by reading the dataset: the blkio throttle the
// daemon runs under (cgroup v1 blkio.throttle.read_{iops,bps}_device, v2 io.max: a cloud
// volume's or a container's limits, exactly), else the kind of device (a spinning disk, a
// solid-state one) or of filesystem (RAM, a network filesystem).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace gpufs {

struct DeviceShape {
  enum class Kind {
    kMemory,   // tmpfs or ramfs: the files are the page cache already
    kBlock,    // a local block device
    kNetwork,  // NFS, Lustre, FUSE...: a request is a round trip
  };
  Kind kind = Kind::kBlock;
  // The bytes the device moves in the time it spends on one request (bandwidth over
  // IOPS): a request costs as much as these bytes do.
  double break_even_bytes = 0;
  std::string why;  // how it was known, as the stats and --advise say it
};

// The shape of the device holding `file` (a blob), as the daemon's own cgroups see it.
DeviceShape ShapeOf(const std::filesystem::path& file);

// The number in queue/`knob` (max_sectors_kb, rotational, ...) of the block device that
// holds `file`, a partition's from its disk; none off a block device (tmpfs, overlay, a
// network filesystem) or where sysfs does not say.
std::optional<uint64_t> DeviceQueueValue(const std::filesystem::path& file, std::string_view knob);

// A blkio throttle's limit for `device` ("MAJOR:MINOR") in the text of a cgroup v1
// blkio.throttle.*_device file (one "MAJOR:MINOR VALUE" line per device).
std::optional<uint64_t> ThrottleOf(std::string_view knob, std::string_view device);

// `key` ("riops", "rbps") of `device` in the text of a cgroup v2 io.max file ("MAJOR:MINOR
// rbps=N wbps=max riops=N wiops=max" lines); none where absent or "max".
std::optional<uint64_t> IoMaxOf(std::string_view io_max, std::string_view device,
                                std::string_view key);

// From a throttle's read limits: bandwidth over IOPS, where both are set.
std::optional<double> ThrottledBreakEven(std::optional<uint64_t> iops, std::optional<uint64_t> bps);

}  // namespace gpufs
