// `gpufsd mount --metrics HOST:PORT`: the daemon's counters at http://HOST:PORT/metrics in
// Prometheus' text format, for scraping. Off by default; bound before the daemon detaches
// so that a port in use refuses the mount rather than failing quietly later.
//
// Whoever can reach the port is a client, and no client may cost the mount a read: at
// most kMaxClients connections are open at once (the rest wait in the kernel's backlog,
// holding none of the daemon's descriptors), each has kRequestDeadline from accept to the
// last byte of its answer, and a request head is at most kMaxRequestBytes. One request per
// connection, answered and closed, from one thread that waits on poll and nothing else.
// (Debian's cpp-httplib 0.11 accepts every connection into an unbounded queue and times
// each recv, not the request; one fixed page needs no more than this loop.)
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "base/error.h"
#include "base/private_files.h"
#include "fs/filesystem.h"

namespace gpufs {

class MetricsServer {
 public:
  static constexpr size_t kMaxClients = 4;
  static constexpr std::chrono::seconds kRequestDeadline{5};
  static constexpr size_t kMaxRequestBytes = 8 << 10;

  // Parses "HOST:PORT" and binds to it; nothing is served yet.
  static Result<std::unique_ptr<MetricsServer>> Bind(const std::string& address);
  // Serves `fs`, which must outlive the server, from a thread of this process.
  void Start(const Filesystem& fs);
  // Stops the thread and closes every connection.
  ~MetricsServer();

 private:
  MetricsServer() = default;
  void Serve(const Filesystem& fs);

  UniqueFd listen_;
  UniqueFd wake_;  // an eventfd the destructor writes to stop Serve
  std::thread thread_;
};

}  // namespace gpufs
