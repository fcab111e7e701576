// Where gpufs-stat's figures come from: the mount table tells whether a path is on a gpufs
// mount; the daemon behind it answers on its control socket (fs/control.h). Every wait is
// bounded, so a stopped or dead daemon gives a message, never a hang.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace gpufs {

struct MountPoint {
  std::string path;    // where it is mounted
  std::string type;    // e.g. fuse.gpufs, ext4
  std::string source;  // what is mounted
  std::string device;  // MAJOR:MINOR; a FUSE mount's connection is numbered by its minor
  bool is_gpufs() const { return type == "fuse.gpufs"; }
};

// The mount that holds `path` (absolute and normalized), from /proc/self/mountinfo.
Result<MountPoint> MountOf(const std::filesystem::path& path);

// The root attribute `name` of the gpufs mount at `mount`, read on a thread of its own so
// that a stopped daemon costs `timeout_s` (ETIMEDOUT), not a hang; ENOTCONN when the
// daemon has exited.
Result<std::string> RootXattr(const std::string& mount, const char* name, double timeout_s);

// Checks that a gpufs mount still has its daemon, and how to reach it.
class DaemonClient {
 public:
  // Asks the mount for its control socket, giving up after `timeout_s`.
  static Result<DaemonClient> Connect(const MountPoint& mount, double timeout_s = 5);

  // One request line, the whole reply text.
  Result<std::string> Ask(const nlohmann::json& request) const;
  Result<nlohmann::json> Stats() const;

  const std::string& socket_path() const { return socket_; }

 private:
  DaemonClient(std::string mount, std::string socket, double timeout_s)
      : mount_(std::move(mount)), socket_(std::move(socket)), timeout_s_(timeout_s) {}
  std::string mount_;
  std::string socket_;
  double timeout_s_;
};

// The gpufs mount that holds `path` and a client of its daemon.
struct ConnectedMount {
  MountPoint mount;
  DaemonClient client;
};
// Finds the mount of `path` (made absolute) and connects to its daemon; a path on no gpufs
// mount is refused with `why` ("-w watches a gpufsd"). Connect's errors keep their code.
Result<ConnectedMount> ConnectToMountOf(const std::string& path, std::string_view why,
                                        double timeout_s);

}  // namespace gpufs
