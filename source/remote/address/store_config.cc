#include "source/remote/address/store_config.h"

#include <algorithm>
#include <thread>

namespace gpufs::remote {

unsigned DefaultTransferThreads() {
  return std::clamp(std::thread::hardware_concurrency() / 2, 2u, 8u);
}

}  // namespace gpufs::remote
