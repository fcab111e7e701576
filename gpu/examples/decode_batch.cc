// gpufs-decode-example [--cuda] FILES...: reads a batch of JPEGs under a gpufs mount with
// gpufs::torch::ReadBatch and decodes each into an HxWxC uint8 tensor (libjpeg, on the CPU;
// with --cuda the bytes arrive in device memory first, as a GPU decoder would want them).
#include <cstddef>
#include <cstdio>

// jpeglib.h uses size_t and FILE without including their headers.
#include <jpeglib.h>

#include <iostream>
#include <string>
#include <vector>

#include "gpu/torch_batch.h"

namespace {

// Decodes a JPEG held in a CPU uint8 tensor.
at::Tensor DecodeJpeg(const at::Tensor& bytes) {
  jpeg_decompress_struct info{};
  jpeg_error_mgr errors{};
  info.err = jpeg_std_error(&errors);
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data_ptr<uint8_t>(), static_cast<unsigned long>(bytes.numel()));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = JCS_RGB;
  jpeg_start_decompress(&info);
  at::Tensor image = at::empty({info.output_height, info.output_width, 3}, at::kByte);
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = image.data_ptr<uint8_t>() + info.output_scanline * info.output_width * 3;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return image;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths;
  at::Device device = at::kCPU;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cuda") {
      device = at::Device(at::kCUDA, 0);
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty()) {
    std::cerr << "usage: gpufs-decode-example [--cuda] FILES...\n";
    return 2;
  }
  try {
    const std::vector<at::Tensor> batch = gpufs::torch::ReadBatch(paths, device);
    for (size_t i = 0; i < batch.size(); ++i) {
      const at::Tensor image = DecodeJpeg(batch[i].cpu().contiguous());
      std::cout << paths[i] << ": " << batch[i].numel() << " bytes on " << batch[i].device()
                << " -> " << image.size(0) << "x" << image.size(1) << "x3, mean "
                << image.to(at::kFloat).mean().item<float>() << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "gpufs-decode-example: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
