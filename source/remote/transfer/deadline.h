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

#include "source/remote/address/store_config.h"

namespace gpufs::remote {

// The total deadline of an attempt that moves `bytes` (of its body; 0 for a HEAD).
std::chrono::milliseconds TotalDeadline(const TransferDeadlines& deadlines, uint64_t bytes);

}  // namespace gpufs::remote
