// How much the kernel may ask of the daemon at once, and whether reads go through its page
// cache: chosen at mount from the machine's cores, the dataset and the cache budget.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "cli/options/mount_options.h"

namespace gpufs {

// Fills in what `args` left to the machine: --threads (four per core, at least 16: a FUSE
// worker blocks while its read waits on the source, so reads in flight are bounded by
// workers, not cores), --max-background (as many as there are workers, so read-ahead is not
// capped at the kernel's 12 for the whole mount, nor queued beyond what workers can take),
// the congestion threshold (3/4 of it, the kernel's own ratio) and streaming. Streaming is
// on when the dataset is larger than the pinned budget and than the memory left beside it
// (`memory_bytes` is MemoryLimit()): the page cache could not keep it either, so every
// byte it took would be a second copy, evicted before its next read. A dataset that fits
// in the page cache keeps it: its later epochs are served by the kernel alone.
void ChooseKernelLimits(MountArgs& args, uint64_t dataset_bytes, unsigned cores,
                        uint64_t memory_bytes);

// The machine's physical memory in bytes (0 when the system does not say).
uint64_t PhysicalMemory();

// The memory this process may use: physical memory, or less where its cgroups (a
// container, a Slurm job) limit it.
uint64_t MemoryLimit();

// What the kernel's page cache may hold beside a pinned budget of `budget` bytes: memory
// available now (MemAvailable, within MemoryLimit) less the budget.
uint64_t PageCacheRoom(uint64_t budget);

// A budget nobody gave (--cache-size left at its default, a quarter of MemoryLimit) is
// no larger than what the dataset fills (`dataset_fill`): the memory beside it is then
// the page cache's to use, and the streaming and miss-read choices see it.
void SizeDefaultBudget(MountArgs& args, uint64_t dataset_fill);

// The choices as the stats report them ("kernel").
nlohmann::json KernelLimitsJson(const MountArgs& args);

}  // namespace gpufs
