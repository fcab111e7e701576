// Threads that hash what peers sent, off the store's one transfer thread: SHA-256 runs at
// about 2 GB/s a core, so on that thread it would cap every read through peers at that rate
// and hold up the transfers behind it.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpufs::remote {

// Thread-safe. Jobs run in the order posted, on any of the threads; once Stop() has begun,
// a job posted runs at once on the poster's thread, so none is lost.
class HashWorkers {
 public:
  explicit HashWorkers(unsigned threads) {
    for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
  }
  ~HashWorkers() { Stop(); }
  HashWorkers(const HashWorkers&) = delete;
  HashWorkers& operator=(const HashWorkers&) = delete;

  void Post(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        jobs_.push_back(std::move(job));
        wake_.notify_one();
        return;
      }
    }
    job();
  }

  // Runs what is queued, then ends the threads.
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  // What a store's peers use: a few, never more than the cores.
  static unsigned DefaultThreads() {
    return std::clamp(std::thread::hardware_concurrency() / 2, 1u, 4u);
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // stopping, and nothing left
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;  // guarded by mu_
  bool stopping_ = false;                   // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace gpufs::remote
