// libtorch integration: a batch of files under a gpufs mount as uint8 tensors, on the GPU
// when asked and available (read by the client library, gpu/batch.h), else in host memory.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace gpufs::torch {

// One 1-D uint8 tensor per path holding the file's bytes, all views of one allocation on
// `device`. A CUDA device on a host without one falls back to the CPU, with a warning.
// Throws c10::Error naming the file at fault.
std::vector<at::Tensor> ReadBatch(const std::vector<std::string>& paths,
                                  const at::Device& device = at::kCPU);

}  // namespace gpufs::torch
