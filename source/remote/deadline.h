// How long one transfer may take, so that no read waits on a slow server for ever: a
// server that answers at 2 bytes a second never stalls (curl's idle check sees bytes),
// yet a 4 MiB block from it would take weeks.
//
// Every attempt has three limits: the connection must be up within `connect`; no byte
// may take longer than `idle` to come; and the whole attempt must end within its total
// deadline, `connect` plus `allowance` plus its size at `floor_rate`. An attempt past a
// limit fails as a timeout: the store's is retried within the retry budget, a peer's
// counts as that peer's failure and the block goes to the next peer, then the store.
#pragma once

#include <chrono>
#include <cstdint>

namespace gpufs::remote {

// The defaults here are the mount's (gpufsd --connect-timeout and the others).
struct TransferDeadlines {
  std::chrono::milliseconds connect{3'000};
  std::chrono::milliseconds idle{10'000};       // no byte for this long: broken
  std::chrono::milliseconds allowance{10'000};  // the total's part that is not size
  uint64_t floor_rate = 1 << 20;                // bytes per second a transfer must beat
};

// The total deadline of an attempt that moves `bytes` (of its body; 0 for a HEAD).
std::chrono::milliseconds TotalDeadline(const TransferDeadlines& deadlines, uint64_t bytes);

}  // namespace gpufs::remote
