// When the store's retries are said. The first failure in a while is logged at once, not at
// the deadline: at mount, a server that is down would otherwise cost the user the whole
// deadline in silence; during an outage, a line every kEvery tells it without a line per
// request. Used by the transfer loop's thread alone.
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <string_view>

namespace gpufs::remote {

class RetryNotice {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kEvery = std::chrono::seconds(30);

  // Logs that `verb` of `object` failed with `reason` and is retried for up to `budget`,
  // unless a line was logged within kEvery of `now`.
  void Say(std::string_view verb, std::string_view object, std::string_view reason,
           std::chrono::milliseconds budget, Clock::time_point now) {
    if (said_ != Clock::time_point{} && now - said_ < kEvery) return;
    said_ = now;
    spdlog::warn("cannot {} {}: {}; retrying for up to {:.0f} s (--retry-seconds)", verb, object,
                 reason, std::chrono::duration<double>(budget).count());
  }

 private:
  Clock::time_point said_{};
};

}  // namespace gpufs::remote
