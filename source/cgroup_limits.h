// The limits the daemon's cgroups set on it: what memory it may use, and the blkio throttle
// of the device under a local dataset (source/device_shape.h). A container or a Slurm job
// is a cgroup smaller than the node, and what it may cache is bounded there, not by RAM.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>
#include <vector>

namespace gpufs {

// The daemon's cgroup folders for `controller` ("blkio", "memory"; "" for cgroup v2's
// unified one), its own first and the root last, since a parent's limit binds its children.
std::vector<std::filesystem::path> CgroupChain(std::string_view controller);

// The least of the limits that `read` finds along `chain`.
template <class Read>
std::optional<uint64_t> LeastLimit(const std::vector<std::filesystem::path>& chain, Read read) {
  std::optional<uint64_t> least;
  for (const auto& folder : chain) {
    if (auto value = read(folder)) least = least ? std::min(*least, *value) : *value;
  }
  return least;
}

// The memory the daemon's cgroups allow it (v1 memory.limit_in_bytes, v2 memory.max, the
// least along the chain); none where no cgroup limits it.
std::optional<uint64_t> CgroupMemoryLimit();

// The memory the kernel calls available now (MemAvailable in /proc/meminfo), or 0 where
// it does not say.
uint64_t MemoryAvailable();

// The first number in the file at `path` ("max" and unreadable files: none).
std::optional<uint64_t> ReadNumber(const std::filesystem::path& path);

}  // namespace gpufs
