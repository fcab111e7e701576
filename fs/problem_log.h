// The last warnings and errors the daemon logged, kept in memory. A detached daemon's log
// may go where nobody looks (a node without syslog, a file no one opens); `gpufs-stat`
// shows these lines beside the figures, so a reader's EIO comes with its cause. The CLI
// adds ProblemSink() to its logger; the control requests report RecentProblems().
#pragma once

#include <spdlog/sinks/sink.h>

#include <memory>
#include <string>
#include <vector>

namespace gpufs {

// The sink that keeps the last lines at warning level and above (thread-safe, one for the
// process).
std::shared_ptr<spdlog::sinks::sink> ProblemSink();

// The last `limit` of them, oldest first, each "YYYY-MM-DD HH:MM:SS level message".
std::vector<std::string> RecentProblems(size_t limit);

}  // namespace gpufs
