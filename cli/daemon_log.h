// Where gpufsd's log goes. In the foreground: stderr. Detached: syslog when /dev/log
// answers, else a file, so that a node without syslog (a container, a minimal image, a
// daemon under slurmd) still keeps the line that says why a read failed: --log-file, or
// by default gpufsd.log in the user's state folder ($XDG_STATE_HOME/gpufs, else
// /var/log/gpufs for root and ~/.local/state/gpufs for others; with no HOME, log/ in the
// private cache folder), named at mount. Either way the last
// warnings and errors are also kept for gpufs-stat (fs/problem_log.h).
#pragma once

#include <spdlog/common.h>

#include <filesystem>
#include <string>

#include "base/error.h"
#include "base/private_files.h"
#include "cli/options/mount_options.h"

namespace gpufs {

class DaemonLog {
 public:
  // Opens what the log needs before the mount starts, so that a log file that cannot be
  // written refuses the mount with its reason. In the foreground, logs to stderr (and to
  // the file when one is named) from now on.
  static Result<DaemonLog> Open(const LogOptions& options, bool foreground);

  // In the detached daemon: syslog or the file, warnings also to the terminal until it
  // is dropped.
  void UseInDaemon();

  // Where the log goes, for messages: "syslog", "stderr" or a path.
  const std::string& where() const { return where_; }

 private:
  spdlog::level::level_enum level_ = spdlog::level::info;
  UniqueFd file_;  // open for appending; -1: syslog or stderr only
  std::string where_;
  bool fallback_ = false;  // the default file, for want of syslog
};

// Makes the default logger (what a command logs before DaemonLog takes over) write its
// messages to stderr ("gpufsd: warning: ..."), through PrintableLine too. Called first
// thing by gpufsd's main.
void EscapeDefaultLog();

// The default log file when there is no syslog: gpufsd.log in the user's state folder.
std::filesystem::path DefaultLogFolder();

}  // namespace gpufs
