#include "source/io_engine.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace gpufs {

Result<size_t> ReadThrough(IoEngine& engine, int fd, int file_slot, uint64_t offset, size_t length,
                           char* buffer, size_t piece) {
  struct Latch {
    std::mutex mu;
    std::condition_variable done;
    size_t left = 0;
    std::vector<ssize_t> results;
  } latch;
  piece = std::max<size_t>(piece, 4096);
  std::vector<IoRequest> requests;
  for (size_t at = 0; at < length; at += piece) {
    const size_t index = requests.size();
    requests.push_back(IoRequest{fd, file_slot, offset + at, std::min(piece, length - at),
                                 buffer + at, [&latch, index](ssize_t n) {
                                   std::lock_guard lock(latch.mu);
                                   latch.results[index] = n;
                                   if (--latch.left == 0) latch.done.notify_all();
                                 }});
  }
  if (requests.empty()) return size_t{0};
  latch.left = requests.size();
  latch.results.assign(requests.size(), 0);
  std::vector<size_t> lengths;
  for (const IoRequest& r : requests) lengths.push_back(r.length);
  engine.Submit(std::move(requests));
  std::unique_lock lock(latch.mu);
  latch.done.wait(lock, [&] { return latch.left == 0; });
  size_t total = 0;
  for (size_t i = 0; i < latch.results.size(); ++i) {
    const ssize_t n = latch.results[i];
    if (n < 0) return Fail(static_cast<int>(-n), "{}", strerror(static_cast<int>(-n)));
    total += static_cast<size_t>(n);
    if (static_cast<size_t>(n) < lengths[i]) break;  // the file ends here
  }
  return total;
}

ssize_t PreadOnce(const IoRequest& r) {
  ssize_t n;
  do {
    n = pread(r.fd, r.buffer, r.length, static_cast<off_t>(r.offset));
  } while (n < 0 && errno == EINTR);
  return n < 0 ? -errno : n;
}

void RequestQueue::Push(std::vector<IoRequest> requests) {
  {
    std::lock_guard lock(mu_);
    for (IoRequest& r : requests) queue_.push_back(std::move(r));
  }
  wake_.notify_all();
}

std::vector<IoRequest> RequestQueue::Take(size_t max, bool wait) {
  std::unique_lock lock(mu_);
  if (wait) wake_.wait(lock, [this] { return closed_ || !queue_.empty(); });
  std::vector<IoRequest> out;
  while (!queue_.empty() && out.size() < max) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  return out;
}

void RequestQueue::Close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  wake_.notify_all();
}

void ServeWithPread(RequestQueue& queue) {
  for (;;) {
    std::vector<IoRequest> one = queue.Take(1, true);
    if (one.empty()) return;
    one[0].done(PreadOnce(one[0]));
  }
}

PreadEngine::PreadEngine(unsigned threads) {
  for (unsigned i = 0; i < std::max(1u, threads); ++i) {
    threads_.emplace_back([this] { ServeWithPread(queue_); });
  }
}

PreadEngine::~PreadEngine() {
  queue_.Close();
  for (std::thread& t : threads_) t.join();
}

void PreadEngine::Submit(std::vector<IoRequest> requests) { queue_.Push(std::move(requests)); }

}  // namespace gpufs
