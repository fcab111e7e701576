// `gpufs-stat -w MNT`: the daemon's counters turned into rates, refreshed in place on a
// terminal (cursor home and clear-to-end-of-line: no flicker, 80 columns), or a line of
// key=value figures per interval when the output is not a terminal, or a JSON object per
// interval with --json (stat_watch_fields.h). While no read reaches gpufsd, the kernel's
// page cache of the mount is measured: an epoch it serves never reaches the daemon.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "cli/stat/stat_watch_fields.h"

namespace gpufs {

struct WatchOptions {
  double interval_s = 1.0;
  unsigned count = 0;     // frames to show; 0: until interrupted
  bool terminal = false;  // redraw in place
  bool json = false;      // a JSON object per refresh (JSON lines), on a terminal or not
  double timeout_s = 5;   // for each answer of the daemon
};

// Returns the exit status.
int RunWatch(const std::string& path, const WatchOptions& options);

// One frame of the terminal view, from two samples of the stats reply `dt_s` apart
// (exposed for tests; `previous` may equal `now`).
std::string WatchFrame(const std::string& mount, const nlohmann::json& previous,
                       const nlohmann::json& now, double dt_s, const KernelView& kernel = {});

}  // namespace gpufs
