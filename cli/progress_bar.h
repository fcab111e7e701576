// A progress line on stderr for pack, index, verify and a tar's first listing: files and
// bytes done, rates and time left. On a terminal it redraws in place twice a second;
// otherwise (logs, CI, the journal) it prints a plain line every ten seconds. With a
// `delay`, a job done sooner shows nothing, and nothing is drawn before the job has a
// total of bytes to go by.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "dataset/format/progress.h"

namespace gpufs {

class ProgressBar {
 public:
  ProgressBar(std::string verb, const Progress& progress,
              std::chrono::milliseconds delay = std::chrono::milliseconds(0));
  ~ProgressBar();  // stops drawing and leaves the last line on screen
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  double elapsed_s() const;

 private:
  void Draw(bool last);

  const std::string verb_;
  const Progress& progress_;
  const bool terminal_;
  const bool delayed_;
  const std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;   // guarded by mu_
  bool drawn_ = false;  // on the drawing thread, then read after it joined
  std::thread thread_;
};

// Makes SIGINT and SIGTERM set `progress.cancel` while the guard lives, so a long job can
// stop and clean up instead of dying half-way.
class CancelOnSignal {
 public:
  explicit CancelOnSignal(Progress& progress);
  ~CancelOnSignal();
};

}  // namespace gpufs
