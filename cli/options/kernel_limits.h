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
// (`memory_bytes` is physical memory): the page cache could not keep it either, so every
// byte it took would be a second copy, evicted before its next read. A dataset that fits
// in the page cache keeps it: its later epochs are served by the kernel alone.
void ChooseKernelLimits(MountArgs& args, uint64_t dataset_bytes, unsigned cores,
                        uint64_t memory_bytes);

// The machine's physical memory in bytes (0 when the system does not say).
uint64_t PhysicalMemory();

// The choices as the stats report them ("kernel").
nlohmann::json KernelLimitsJson(const MountArgs& args);

}  // namespace gpufs
