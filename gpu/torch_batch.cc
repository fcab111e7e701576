#include "gpu/torch_batch.h"

#include <c10/util/Exception.h>

#include <memory>
#include <mutex>

#include "gpu/batch.h"

namespace gpufs::torch {
namespace {

// One reader per kind of memory, made on first use and kept: its staging buffers are
// pinned once, not per batch.
struct Readers {
  std::mutex mu;  // one batch at a time per reader
  std::unique_ptr<gpu::Stager> device_stager, host_stager;
  std::unique_ptr<gpu::BatchReader> device, host;
};

Readers& Shared() {
  static Readers readers;
  return readers;
}

gpu::BatchReader& ReaderFor(bool cuda) {
  Readers& r = Shared();
  if (cuda && !r.device_stager) r.device_stager = gpu::MakeDeviceStager();
  if (cuda && r.device_stager->on_device() && !r.device) {
    auto made = gpu::BatchReader::Create(*r.device_stager);
    TORCH_CHECK(made.ok(), "gpufs: ", made.error().message);
    r.device = std::move(*made);
  }
  if (cuda && r.device) return *r.device;
  if (cuda) {
    TORCH_WARN_ONCE("gpufs: no GPU (", r.device_stager->description(), "); reading to CPU");
  }
  if (!r.host) {
    r.host_stager = gpu::MakeHostStager();
    auto made = gpu::BatchReader::Create(*r.host_stager);
    TORCH_CHECK(made.ok(), "gpufs: ", made.error().message);
    r.host = std::move(*made);
  }
  return *r.host;
}

}  // namespace

std::vector<at::Tensor> ReadBatch(const std::vector<std::string>& paths, const at::Device& device) {
  std::vector<gpu::MemberLocation> members;
  for (const std::string& path : paths) {
    auto member = gpu::LocateMember(path);
    TORCH_CHECK(member.ok(), "gpufs: ", member.error().message);
    members.push_back(std::move(*member));
  }
  std::lock_guard lock(Shared().mu);
  gpu::BatchReader& reader = ReaderFor(device.is_cuda());
  const bool on_device = reader.stager().on_device();
  const gpu::BatchPlan plan = gpu::PlanBatch(std::move(members));
  // torch owns the output; the reader fills it in place.
  at::Tensor all =
      at::empty({static_cast<int64_t>(plan.output_bytes)},
                at::TensorOptions().dtype(at::kByte).device(on_device ? device : at::kCPU));
  gpufs::Status s = reader.ReadInto(plan, all.data_ptr());
  TORCH_CHECK(s.ok(), "gpufs: ", s.ok() ? "" : s.error().message);
  std::vector<at::Tensor> tensors;
  for (size_t i = 0; i < plan.members.size(); ++i) {
    tensors.push_back(all.narrow(0, static_cast<int64_t>(plan.destination[i]),
                                 static_cast<int64_t>(plan.members[i].size)));
  }
  return tensors;
}

}  // namespace gpufs::torch
