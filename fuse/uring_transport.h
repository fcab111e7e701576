// FUSE over io_uring: the kernel hands requests to the daemon in buffers the daemon
// registered, one io_uring command per request, and takes the reply with the command that
// fetches the next request. Against the read/write loop on /dev/fuse, a request costs one
// system call instead of two and no wake-up of a thread sleeping in read(2): measured here
// with libfuse's own example, about twice the small-file rate at half the daemon's CPU per
// request (BENCHMARKS.md, "What a file and a byte cost").
//
// libfuse gained the transport in 3.18, which no Debian release has; gpufs keeps libfuse
// 3.14 for everything else and puts this transport under it. The session is given a custom
// writev (fuse_session_custom_io), through which every reply passes: the INIT reply gets
// the io_uring flag, and the reply to a request that came from a ring entry is put into
// that entry. The kernel's requests from the ring are handed to fuse_session_process_buf,
// so each operation's code is the same on both transports. FORGET, INTERRUPT and
// notifications keep using /dev/fuse, and libfuse's loop keeps serving them.
//
// One queue per possible CPU (the kernel sends a request to the queue of the CPU its
// caller runs on, and uses the rings only once every queue has an entry); each queue has
// several threads, each with its own ring and one entry, so a read that waits on a group's
// load holds one entry while the queue's other threads serve hits.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/error.h"
#include "fs/kernel_stat.h"
#include "fuse/fuse_ops.h"

namespace gpufs {

// Why FUSE over io_uring cannot be used here (the module parameter missing or off), or
// empty when it can. Reads `parameter` (the kernel's, unless a test names another).
std::string UringUnavailable(const char* parameter = nullptr);

class UringTransport {
 public:
  // Between `se` (made with `context` as its userdata, mounted, not yet served) and its
  // device: every reply now passes through the transport, and the rings start once INIT is
  // answered. `threads_per_queue` entries wait on each queue.
  static Result<std::unique_ptr<UringTransport>> Install(fuse_session* se, FuseContext& context,
                                                         unsigned threads_per_queue);
  ~UringTransport();
  UringTransport(const UringTransport&) = delete;
  UringTransport& operator=(const UringTransport&) = delete;

  // Joins the rings' threads and closes their rings; call once the session has stopped
  // (after unmounting), before destroying the session. The stats stay readable.
  void Stop();
  // "io_uring" once INIT asked for it and the rings run, else "dev_fuse" and, where the
  // rings could not be had, why. Thread-safe.
  std::string Describe() const;

  // Requests served from the rings so far. Thread-safe.
  uint64_t RingRequests() const;

  static unsigned PossibleCpus();

  // One ring entry: its buffers and the request it holds (defined where it is used).
  struct Entry;

 private:
  UringTransport(fuse_session* se, unsigned threads_per_queue);

  struct Worker;
  static ssize_t WriteV(int fd, struct iovec* iov, int count, void* userdata);
  static ssize_t Read(int fd, void* buf, size_t len, void* userdata);
  ssize_t ForwardInit(int fd, struct iovec* iov, int count);
  Status MakeWorkers(size_t payload_size);
  void Start(size_t payload_size);
  void RunQueue(Worker& worker);
  [[noreturn]] void Unregistered(const Worker& worker, int res);
  void Serve(Entry& entry);
  void NoteFailure(std::string why);

  fuse_session* const se_;
  const int fd_;
  const unsigned threads_per_queue_;
  std::atomic<bool> init_seen_{false};
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<Worker>> workers_;  // set before ready_, then kept
  std::atomic<bool> ready_{false};                // INIT asked for io_uring, the rings run
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  std::string failure_;  // guarded by mu_: the first thing that failed
};

}  // namespace gpufs
