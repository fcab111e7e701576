// A read cut into parts (blocks of a GET, members of a read through peers): the caller's
// `done` runs once, when every part is in, with the whole length or the first part's error.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>

#include "base/error.h"

namespace gpufs::remote {

// Thread-safe: parts may finish on any thread, at once (a GET's blocks on several of the
// store's transfer threads); `done` runs on the thread of the last.
class Gather {
 public:
  Gather(size_t blocks, size_t length, std::function<void(Result<size_t>)> done)
      : pending_(blocks), length_(length), done_(std::move(done)) {}

  void BlockDone(const Result<size_t>& outcome) {
    if (!outcome.ok()) {
      std::lock_guard lock(mu_);
      if (!error_) error_ = outcome.error();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    // The last part: every other has counted down, so none writes error_ any more.
    std::optional<Error> error;
    {
      std::lock_guard lock(mu_);
      error = std::move(error_);
    }
    if (error) return done_(*error);
    done_(length_);
  }

 private:
  std::atomic<size_t> pending_;
  const size_t length_;
  std::function<void(Result<size_t>)> done_;
  std::mutex mu_;
  std::optional<Error> error_;  // the first block's failure, guarded by mu_
};

}  // namespace gpufs::remote
