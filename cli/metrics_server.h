// `gpufsd mount --metrics HOST:PORT`: the daemon's counters at http://HOST:PORT/metrics in
// Prometheus' text format, for scraping. Off by default; bound before the daemon detaches
// so that a port in use refuses the mount rather than failing quietly later.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "dataset/error.h"
#include "fs/filesystem.h"

namespace httplib {
class Server;
}

namespace gpufs {

class MetricsServer {
 public:
  // Parses "HOST:PORT" and binds to it; nothing is served yet.
  static Result<std::unique_ptr<MetricsServer>> Bind(const std::string& address);
  // Serves `fs`, which must outlive the server, from a thread of this process.
  void Start(const Filesystem& fs);
  ~MetricsServer();

 private:
  MetricsServer();
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace gpufs
