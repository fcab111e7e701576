// io_uring engine: each I/O thread owns a ring; requests arrive through one queue. A thread
// keeps up to queue_depth reads in flight, and waits on completions with a short timeout
// so that new requests are picked up while others are outstanding.
#include <liburing.h>
#include <unistd.h>

#include <cstring>

#include "source/io_engine.h"

namespace gpufs {
namespace {

// The arena is registered in chunks as reads first land in them, so pages are pinned as
// the cache fills rather than all at start-up; a read must lie within one chunk to use it.
constexpr size_t kRegisteredChunk = 256ull << 20;

class UringEngine : public IoEngine {
 public:
  explicit UringEngine(const UringOptions& options) : options_(options) {}
  ~UringEngine() override {
    queue_.Close();
    for (std::thread& t : threads_) t.join();
  }

  Status Start() {
    // One ring up front, so an unsupported kernel is reported instead of found later.
    io_uring probe;
    const int rc = io_uring_queue_init(4, &probe, 0);
    if (rc < 0) return Fail(-rc, "cannot set up io_uring: {}", strerror(-rc));
    io_uring_queue_exit(&probe);
    for (unsigned i = 0; i < std::max(1u, options_.threads); ++i) {
      threads_.emplace_back([this] { Run(); });
    }
    return Ok{};
  }

  std::string_view name() const override { return engine_name::kUring; }

  void Submit(std::vector<IoRequest> requests) override { queue_.Push(std::move(requests)); }

 private:
  struct Ring {
    io_uring ring{};
    std::vector<bool> chunks;  // registered arena chunks; empty when registration failed
    std::vector<int> files;    // registered descriptor per slot; -1 when empty
  };

  bool Setup(Ring& r) {
    if (io_uring_queue_init(options_.queue_depth, &r.ring, 0) < 0) return false;
    const size_t chunks = (options_.buffers_size + kRegisteredChunk - 1) / kRegisteredChunk;
    if (options_.buffers && chunks > 0 &&
        io_uring_register_buffers_sparse(&r.ring, static_cast<unsigned>(chunks)) == 0) {
      r.chunks.assign(chunks, false);
    }
    if (options_.max_files > 0 &&
        io_uring_register_files_sparse(&r.ring, options_.max_files) == 0) {
      r.files.assign(options_.max_files, -1);
    }
    return true;
  }

  // Fills one SQE for `request`, using the registered buffer and file when it can.
  void Prepare(Ring& r, IoRequest* request) {
    io_uring_sqe* sqe = io_uring_get_sqe(&r.ring);
    int fd = request->fd;
    bool fixed_file = false;
    if (request->file_slot >= 0 && static_cast<size_t>(request->file_slot) < r.files.size()) {
      int& slot = r.files[request->file_slot];
      if (slot != fd && io_uring_register_files_update(&r.ring, request->file_slot, &fd, 1) == 1) {
        slot = fd;
      }
      if (slot == fd) {
        fd = request->file_slot;
        fixed_file = true;
      }
    }
    const int chunk = RegisteredChunk(r, request->buffer, request->length);
    if (chunk >= 0) {
      io_uring_prep_read_fixed(sqe, fd, request->buffer, request->length, request->offset, chunk);
    } else {
      io_uring_prep_read(sqe, fd, request->buffer, request->length, request->offset);
    }
    if (fixed_file) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, request);
  }

  // The registered chunk holding [buffer, buffer + length), registering it on first use;
  // -1 when the range is outside the arena, straddles chunks, or cannot be registered.
  int RegisteredChunk(Ring& r, char* buffer, size_t length) {
    if (r.chunks.empty() || buffer < options_.buffers || length == 0) return -1;
    const size_t at = static_cast<size_t>(buffer - options_.buffers);
    const size_t chunk = at / kRegisteredChunk;
    if (at + length > options_.buffers_size || chunk != (at + length - 1) / kRegisteredChunk) {
      return -1;
    }
    if (!r.chunks[chunk]) {
      iovec iov{options_.buffers + chunk * kRegisteredChunk,
                std::min(kRegisteredChunk, options_.buffers_size - chunk * kRegisteredChunk)};
      if (io_uring_register_buffers_update_tag(&r.ring, static_cast<unsigned>(chunk), &iov, nullptr,
                                               1) != 1) {
        r.chunks.clear();  // not allowed here (e.g. RLIMIT_MEMLOCK): stop trying
        return -1;
      }
      r.chunks[chunk] = true;
    }
    return static_cast<int>(chunk);
  }

  void Run() {
    Ring r;
    // Without a ring (a kernel limit hit after start-up), this thread reads synchronously.
    if (!Setup(r)) return ServeWithPread(queue_);
    unsigned in_flight = 0;
    for (;;) {
      // Block for work only when nothing is in flight; else take what is there and reap.
      std::vector<IoRequest> batch = queue_.Take(options_.queue_depth - in_flight, in_flight == 0);
      if (batch.empty() && in_flight == 0) break;  // closed and drained
      for (IoRequest& request : batch) Prepare(r, new IoRequest(std::move(request)));
      in_flight += static_cast<unsigned>(batch.size());
      if (!batch.empty()) io_uring_submit(&r.ring);
      Reap(r, in_flight);
    }
    // Ring teardown is deferred in the kernel; unregistering is not, so the blobs are
    // released before the daemon exits (else their filesystem stays busy a moment).
    if (!r.files.empty()) io_uring_unregister_files(&r.ring);
    if (!r.chunks.empty()) io_uring_unregister_buffers(&r.ring);
    io_uring_queue_exit(&r.ring);
  }

  void Reap(Ring& r, unsigned& in_flight) {
    if (in_flight == 0) return;
    __kernel_timespec timeout{0, 1'000'000};  // 1 ms: then look at the queue again
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe_timeout(&r.ring, &cqe, &timeout) != 0) return;
    unsigned head;
    unsigned seen = 0;
    io_uring_for_each_cqe(&r.ring, head, cqe) {
      auto* request = static_cast<IoRequest*>(io_uring_cqe_get_data(cqe));
      request->done(cqe->res);
      delete request;
      ++seen;
    }
    io_uring_cq_advance(&r.ring, seen);
    in_flight -= seen;
  }

  const UringOptions options_;
  RequestQueue queue_;
  std::vector<std::thread> threads_;
};

}  // namespace

Result<std::unique_ptr<IoEngine>> MakeUringEngine(const UringOptions& options) {
  auto engine = std::make_unique<UringEngine>(options);
  if (Status s = engine->Start(); !s) return s.error();
  return std::unique_ptr<IoEngine>(std::move(engine));
}

}  // namespace gpufs
