#include "cli/progress_bar.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

namespace gpufs {
namespace {

std::string Duration(double seconds) {
  if (seconds < 0 || seconds > 360000) return "--:--";
  const auto s = static_cast<long>(seconds);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{:02}:{:02}", s / 60, s % 60);
}

std::atomic<bool>* g_cancel = nullptr;  // what the signal handler sets

void OnSignal(int) {
  if (g_cancel) g_cancel->store(true);
}

}  // namespace

ProgressBar::ProgressBar(std::string verb, const Progress& progress,
                         std::chrono::milliseconds delay)
    : verb_(std::move(verb)),
      progress_(progress),
      terminal_(isatty(STDERR_FILENO) != 0),
      delayed_(delay.count() > 0),
      start_(std::chrono::steady_clock::now()) {
  thread_ = std::thread([this, delay] {
    const auto period = terminal_ ? std::chrono::milliseconds(500) : std::chrono::seconds(10);
    std::unique_lock lock(mu_);
    // A delayed bar draws once its delay is over, then every period; neither before the
    // job knows its total. One without a delay draws every period, as pack always has.
    auto draw = [this] {
      if (!delayed_ || progress_.total_bytes.load() > 0) Draw(false);
    };
    if (wake_.wait_for(lock, delay, [this] { return stop_; })) return;
    if (delayed_) draw();
    while (!wake_.wait_for(lock, period, [this] { return stop_; })) draw();
  });
}

ProgressBar::~ProgressBar() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  // A job refused at once leaves no bar, nor one done within its delay.
  if (delayed_ ? drawn_ : progress_.files.load() > 0) Draw(true);
}

double ProgressBar::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::Draw(bool last) {
  drawn_ = true;
  const double files = static_cast<double>(progress_.files.load());
  const double bytes = static_cast<double>(progress_.bytes.load());
  const double total_files = static_cast<double>(progress_.total_files.load());
  const double total_bytes = static_cast<double>(progress_.total_bytes.load());
  const double t = std::max(elapsed_s(), 1e-3);
  const double share = total_bytes > 0 ? bytes / total_bytes : 0;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(share * kWidth);
  const std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  const std::string line = fmt::format(
      "{} [{}] {:3.0f}%  {:.0f}{} files  {:.1f}/{:.1f} MB  {:.0f} files/s  {:.1f} MB/s  "
      "ETA {}",
      verb_, bar, share * 100, files, total_files > 0 ? fmt::format("/{:.0f}", total_files) : "",
      bytes / 1e6, total_bytes / 1e6, files / t, bytes / 1e6 / t,
      last ? "done" : Duration(share > 0 ? t / share - t : -1));
  if (terminal_) {
    fmt::print(stderr, "\r\033[K{}{}", line, last ? "\n" : "");
  } else {
    fmt::print(stderr, "{}\n", line);
  }
}

CancelOnSignal::CancelOnSignal(Progress& progress) {
  g_cancel = &progress.cancel;
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

CancelOnSignal::~CancelOnSignal() {
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  g_cancel = nullptr;
}

}  // namespace gpufs
