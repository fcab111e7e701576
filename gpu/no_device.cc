// The stager of a host without a usable GPU: every device call fails with ENOTSUP and the
// reason, so callers fall back to host memory and can say why.
#include "gpu/no_device.h"

namespace gpufs::gpu {
namespace {

class NoDevice : public Stager {
 public:
  explicit NoDevice(std::string why) : why_(std::move(why)) {}
  std::string_view name() const override { return "none"; }
  bool on_device() const override { return false; }
  std::string description() const override { return why_; }
  Status RegisterHost(void*, size_t) override { return No(); }
  void UnregisterHost(void*) override {}
  Result<void*> AllocateDevice(size_t) override { return No(); }
  void FreeDevice(void*) override {}
  Result<void*> AllocatePinned(size_t) override { return No(); }
  void FreePinned(void*) override {}
  Result<StreamId> CreateStream() override { return No(); }
  void DestroyStream(StreamId) override {}
  Status CopyToDevice(void*, const void*, size_t, StreamId) override { return No(); }
  Result<uint64_t> Fence(StreamId) override { return No(); }
  Status Wait(uint64_t) override { return No(); }
  Status Synchronize(StreamId) override { return No(); }
  Status CopyToHost(void*, const void*, size_t) override { return No(); }
  Result<size_t> ReadDirect(int, uint64_t, void*, size_t) override { return No(); }
  bool has_direct_reads() const override { return false; }

 private:
  Error No() const { return Fail(ENOTSUP, "no GPU: {}", why_); }
  std::string why_;
};

}  // namespace

std::unique_ptr<Stager> MakeNoDeviceStager(std::string why) {
  return std::make_unique<NoDevice>(std::move(why));
}

}  // namespace gpufs::gpu
