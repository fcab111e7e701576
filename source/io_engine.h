// The I/O engine: where the group cache's reads go. Requests are asynchronous; the
// callback runs on an engine thread with the byte count or -errno. Two implementations:
// UringEngine (io_uring rings owned by I/O threads) and PreadEngine (a thread pool doing
// pread), which is the fallback where io_uring is unavailable and the stand-in for tests.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/error.h"

namespace gpufs {

// The engines' names, spelled here once for --io-engine and the stats.
namespace engine_name {
inline constexpr std::string_view kUring = "io_uring";
inline constexpr std::string_view kPread = "pread";
inline constexpr std::string_view kAll[] = {kUring, kPread};
}  // namespace engine_name

struct IoRequest {
  int fd = -1;
  int file_slot = -1;  // stable id of the file (a blob), for registered files; -1: none
  uint64_t offset = 0;
  size_t length = 0;
  char* buffer = nullptr;
  bool urgent = false;                // a reader waits on it: taken before the others
  std::function<void(ssize_t)> done;  // bytes read, or -errno
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual std::string_view name() const = 0;
  // Queues the requests; thread-safe. Every request's `done` runs exactly once.
  virtual void Submit(std::vector<IoRequest> requests) = 0;
};

// The queue an engine's threads take requests from. Thread-safe.
class RequestQueue {
 public:
  void Push(std::vector<IoRequest> requests);
  // Up to `max` requests, urgent ones first. With `wait`, blocks until there is one or the queue is
  // closed; the result is then empty only once the queue is closed and drained.
  std::vector<IoRequest> Take(size_t max, bool wait);
  // Wakes every waiter; what is queued is still handed out.
  void Close();

 private:
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<IoRequest> urgent_;  // taken first, in order; guarded by mu_
  std::deque<IoRequest> queue_;   // guarded by mu_
  bool closed_ = false;           // guarded by mu_
};

// Serves requests from `queue` with PreadOnce, one at a time, until it is closed and drained.
void ServeWithPread(RequestQueue& queue);

// Serves one request with a single pread (a regular file reads short only at its end, and
// with O_DIRECT a retry at an unaligned remainder would fail anyway); bytes or -errno.
ssize_t PreadOnce(const IoRequest& request);

class PreadEngine : public IoEngine {
 public:
  explicit PreadEngine(unsigned threads);
  ~PreadEngine() override;
  std::string_view name() const override { return engine_name::kPread; }
  void Submit(std::vector<IoRequest> requests) override;

 private:
  RequestQueue queue_;
  std::vector<std::thread> threads_;
};

// io_uring with one ring per I/O thread. `buffers` (the cache arena) is registered with
// every ring so reads into it skip per-request page pinning; blobs are registered as
// they are first read, up to `max_files`.
struct UringOptions {
  unsigned threads = 2;
  unsigned queue_depth = 64;
  char* buffers = nullptr;
  size_t buffers_size = 0;
  unsigned max_files = 0;
};

// An io_uring engine, or the reason there cannot be one here.
Result<std::unique_ptr<IoEngine>> MakeUringEngine(const UringOptions& options);

// An io_uring engine where the kernel allows one, else a PreadEngine of `pread_threads`
// threads; `fallback` (when given) is then told why. The daemon and the GPU client pick
// their engines alike through this.
std::unique_ptr<IoEngine> MakeIoEngine(const UringOptions& options, unsigned pread_threads,
                                       std::string* fallback = nullptr);

}  // namespace gpufs
