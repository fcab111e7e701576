// Counters a long job (pack, index, verify) adds to while a display reads them, and the
// flag that asks the job to stop.
#pragma once

#include <atomic>
#include <cstdint>

namespace gpufs {

struct Progress {
  std::atomic<uint64_t> files{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> total_files{0};
  std::atomic<uint64_t> total_bytes{0};
  std::atomic<bool> cancel{false};  // set (e.g. on SIGINT) to stop early and clean up
};

}  // namespace gpufs
