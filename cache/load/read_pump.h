// One thread at a time submits a queue's reads to the source, outside the queue's lock:
// a caller that finds another pumping asks it to look again instead of waiting, so no
// read queued meanwhile is left behind and no caller blocks on another's submission.
// Shared by the group loads and the tier stager.
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include "source/blob_source.h"

namespace gpufs {

struct ReadPump {
  bool pumping = false;  // a thread is submitting; guarded by the owner's lock
  bool again = false;    // something changed while it did; guarded by the owner's lock

  // Under `lock` (released while submitting): submits what `next()` hands out, under the
  // lock, until it has nothing more. Returns false when another thread is pumping.
  template <typename Next>
  bool Run(BlobSource& source, std::unique_lock<std::mutex>& lock, Next&& next) {
    if (pumping) {
      again = true;
      return false;
    }
    pumping = true;
    for (;;) {
      again = false;
      std::vector<BlobRead> reads = next();
      if (reads.empty() && !again) break;
      lock.unlock();
      if (!reads.empty()) source.Submit(ReadKind::kGroup, std::move(reads));
      lock.lock();
    }
    pumping = false;
    return true;
  }
};

}  // namespace gpufs
