// `gpufs-stat -w MNT`: the daemon's counters turned into rates, refreshed in place on a
// terminal (cursor home and clear-to-end-of-line: no flicker, 80 columns), or a line of
// key=value figures per interval when the output is not a terminal.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace gpufs {

struct WatchOptions {
  double interval_s = 1.0;
  unsigned count = 0;     // frames to show; 0: until interrupted
  bool terminal = false;  // redraw in place
  double timeout_s = 5;   // for each answer of the daemon
};

// Returns the exit status.
int RunWatch(const std::string& path, const WatchOptions& options);

// One frame of the terminal view, from two samples of the stats reply `dt_s` apart
// (exposed for tests; `previous` may equal `now`).
std::string WatchFrame(const std::string& mount, const nlohmann::json& previous,
                       const nlohmann::json& now, double dt_s);
// The same figures as one key=value line.
std::string WatchLine(const nlohmann::json& previous, const nlohmann::json& now, double dt_s);

}  // namespace gpufs
