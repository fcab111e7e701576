#pragma once

#include <memory>
#include <string>

#include "gpu/staging.h"

namespace gpufs::gpu {

// A stager whose every device call fails with ENOTSUP, naming `why`.
std::unique_ptr<Stager> MakeNoDeviceStager(std::string why);

}  // namespace gpufs::gpu
