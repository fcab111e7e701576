// The daemon's end of the control protocol (fs/control.h): a local socket, private to the
// mounting user, answered by one thread, one connection at a time. gpufs-stat finds it
// through the root's user.gpufs.control.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "base/error.h"
#include "fs/filesystem.h"

namespace gpufs {

class ControlServer {
 public:
  // Binds the socket in the user's runtime folder (/run/gpufs for root, else
  // $XDG_RUNTIME_DIR/gpufs, else /tmp/gpufs-UID; when that is not private to this user, a
  // fresh /tmp/gpufs-UID-XXXXXX, logged), named after this process, and starts
  // answering. `fs` must outlive the server.
  static Result<std::unique_ptr<ControlServer>> Start(const Filesystem& fs);
  // Stops answering and removes the socket (and a fresh folder made for it).
  ~ControlServer();

  const std::string& path() const { return path_; }

 private:
  ControlServer(const Filesystem& fs, std::string path, int listen_fd, int stop_fd,
                std::string fresh_folder);
  void Serve();
  void Answer(int fd);

  const Filesystem& fs_;
  const std::string path_;
  const int listen_fd_;
  const int stop_fd_;               // an eventfd; written to stop the thread
  const std::string fresh_folder_;  // made for this socket alone: removed with it
  std::thread thread_;
};

}  // namespace gpufs
