// Host memory standing in for a device: copies are memcpy, done at once, so streams and
// fences are bookkeeping only. Counts its copies, which the batching tests check.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "gpu/staging.h"

namespace gpufs::gpu {
namespace {

class HostStager : public Stager {
 public:
  std::string_view name() const override { return "host"; }
  bool on_device() const override { return false; }
  std::string description() const override { return "host memory (no GPU in use)"; }
  Status RegisterHost(void*, size_t) override { return Ok{}; }
  void UnregisterHost(void*) override {}
  Result<void*> AllocateDevice(size_t bytes) override { return Allocate(bytes); }
  void FreeDevice(void* pointer) override { std::free(pointer); }
  Result<void*> AllocatePinned(size_t bytes) override { return Allocate(bytes); }
  void FreePinned(void* pointer) override { std::free(pointer); }
  Result<StreamId> CreateStream() override { return next_stream_++; }
  void DestroyStream(StreamId) override {}
  Status CopyToDevice(void* device, const void* source, size_t bytes, StreamId) override {
    std::memcpy(device, source, bytes);
    return Ok{};
  }
  Result<uint64_t> Fence(StreamId) override { return ++fences_; }
  Status Wait(uint64_t) override { return Ok{}; }
  Status Synchronize(StreamId) override { return Ok{}; }
  Status CopyToHost(void* host, const void* device, size_t bytes) override {
    std::memcpy(host, device, bytes);
    return Ok{};
  }
  Result<size_t> ReadDirect(int, uint64_t, void*, size_t) override {
    return Fail(ENOTSUP, "host memory has no direct reads");
  }
  bool has_direct_reads() const override { return false; }

 private:
  static Result<void*> Allocate(size_t bytes) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) return Fail(ENOMEM, "cannot allocate {} bytes", bytes);
    return p;
  }
  StreamId next_stream_ = 1;
  uint64_t fences_ = 0;
};

}  // namespace

std::unique_ptr<Stager> MakeHostStager() { return std::make_unique<HostStager>(); }

}  // namespace gpufs::gpu
