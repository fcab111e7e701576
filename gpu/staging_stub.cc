// Built without the CUDA toolkit: no device, ever. The interface is the CUDA build's, so
// callers fall back at run time exactly as on a host without a GPU.
#include "gpu/no_device.h"

namespace gpufs::gpu {

std::unique_ptr<Stager> MakeDeviceStager() {
  return MakeNoDeviceStager(
      "gpufs was built without CUDA (meson -Dcuda=enabled needs the toolkit)");
}

}  // namespace gpufs::gpu
