#include "source/io_engine.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace gpufs {

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
    for (IoRequest& r : requests) (r.urgent ? urgent_ : queue_).push_back(std::move(r));
  }
  wake_.notify_all();
}

std::vector<IoRequest> RequestQueue::Take(size_t max, bool wait) {
  std::unique_lock lock(mu_);
  if (wait) wake_.wait(lock, [this] { return closed_ || !urgent_.empty() || !queue_.empty(); });
  std::vector<IoRequest> out;
  for (std::deque<IoRequest>* q : {&urgent_, &queue_}) {
    while (!q->empty() && out.size() < max) {
      out.push_back(std::move(q->front()));
      q->pop_front();
    }
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

std::unique_ptr<IoEngine> MakeIoEngine(const UringOptions& options, unsigned pread_threads,
                                       std::string* fallback) {
  auto engine = MakeUringEngine(options);
  if (engine) return std::move(*engine);
  if (fallback) *fallback = engine.error().message;
  return std::make_unique<PreadEngine>(pread_threads);
}

}  // namespace gpufs
