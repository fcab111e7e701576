// The GPU seam: everything gpufs asks of a device, behind one interface with two
// implementations picked by meson (docs/style.md, optional dependencies):
//   staging_cuda.cc  the CUDA driver and cuFile, loaded with dlopen at run time, so one
//                    binary runs on hosts with and without a GPU (KvikIO does the same);
//   staging_stub.cc  built without the CUDA toolkit: reports no device.
// HostStager is the third, always built: "device" memory is host memory. It is the CPU
// fallback of the client library (torch CPU tensors) and the fake its unit tests use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/error.h"

namespace gpufs::gpu {

// A copy engine queue; copies on one stream complete in order.
using StreamId = int;

class Stager {
 public:
  virtual ~Stager() = default;
  virtual std::string_view name() const = 0;
  // Whether buffers live on a device (false: host memory).
  virtual bool on_device() const = 0;
  // What the device is, or why there is none.
  virtual std::string description() const = 0;

  // Page-locks and maps `bytes` at `base` for DMA; done once per region, never per batch.
  virtual Status RegisterHost(void* base, size_t bytes) = 0;
  virtual void UnregisterHost(void* base) = 0;

  virtual Result<void*> AllocateDevice(size_t bytes) = 0;
  virtual void FreeDevice(void* pointer) = 0;
  // Page-locked host memory, the source of full-speed copies.
  virtual Result<void*> AllocatePinned(size_t bytes) = 0;
  virtual void FreePinned(void* pointer) = 0;

  virtual Result<StreamId> CreateStream() = 0;
  virtual void DestroyStream(StreamId stream) = 0;
  // Queues a host-to-device copy; `source` must stay unchanged until the stream has
  // passed it (Synchronize, or a later Fence on the same stream).
  virtual Status CopyToDevice(void* device, const void* source, size_t bytes, StreamId stream) = 0;
  // Marks the stream's current position; Wait(fence) returns once copies before it ended.
  virtual Result<uint64_t> Fence(StreamId stream) = 0;
  virtual Status Wait(uint64_t fence) = 0;
  virtual Status Synchronize(StreamId stream) = 0;
  // Copies device bytes back (tests, checks).
  virtual Status CopyToHost(void* host, const void* device, size_t bytes) = 0;

  // cuFile (GPUDirect Storage): reads `bytes` at `offset` of `fd` straight into device
  // memory. ENOTSUP where the driver has no GDS; callers fall back to staged copies.
  virtual Result<size_t> ReadDirect(int fd, uint64_t offset, void* device, size_t bytes) = 0;
  virtual bool has_direct_reads() const = 0;
};

// The CUDA stager when this build has one and a device answers; else the stub's. Never
// null.
std::unique_ptr<Stager> MakeDeviceStager();
// Host memory standing in for a device.
std::unique_ptr<Stager> MakeHostStager();

}  // namespace gpufs::gpu
