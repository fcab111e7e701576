// The kernel tier: how much of a file the kernel's page cache holds. cachestat(2) (Linux
// 6.5+) counts without mapping the file; elsewhere, and when each page's state is wanted,
// the file is mapped and mincore(2) asked, as vmtouch does. Neither reads file data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

namespace gpufs {

// Pages as vmtouch counts them: 4 KiB pages, each file's last one partial. Every tier is
// reported in these, whatever the system's page size.
constexpr uint64_t kStatPageSize = 4096;
inline uint64_t PagesOf(uint64_t bytes) { return (bytes + kStatPageSize - 1) / kStatPageSize; }

struct KernelPages {
  uint64_t resident = 0;
  uint64_t total = 0;       // pages of the file, the last one partial
  std::vector<bool> pages;  // each page's state, when asked for
};

// Thread-safe. `per_page` fills `pages` (and so always maps the file).
Result<KernelPages> KernelPagesOf(const std::string& path, bool per_page);

}  // namespace gpufs
