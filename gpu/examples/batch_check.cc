// gpufs-batch-check FILES...: reads the files through the client library (to the GPU when
// there is one, else to host memory) and compares each with a plain read of the file.
// Exit status 0 when every byte matches. Used by the tests and as a quick check on a host.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <fstream>
#include <sstream>

#include "gpu/batch.h"

namespace {

std::string PlainRead(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"read files through the gpufs client library and compare with plain reads"};
  std::vector<std::string> paths;
  bool host = false;
  size_t buffer_kib = 8192;
  app.add_option("FILES", paths, "files under a gpufs mount")->required();
  app.add_flag("--host", host, "stage into host memory even when a GPU is present");
  app.add_option("--buffer-kib", buffer_kib, "staging buffer size")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto stager = host ? gpufs::gpu::MakeHostStager() : gpufs::gpu::MakeDeviceStager();
  if (!stager->on_device() && !host) {
    fmt::print("no GPU ({}): staging into host memory\n", stager->description());
    stager = gpufs::gpu::MakeHostStager();
  }
  gpufs::gpu::ReaderOptions options;
  options.buffer_bytes = buffer_kib * 1024;
  auto reader = gpufs::gpu::BatchReader::Create(*stager, options);
  if (!reader) return fmt::print(stderr, "gpufs-batch-check: {}\n", reader.error().message), 1;
  auto batch = (*reader)->Read(paths);
  if (!batch) return fmt::print(stderr, "gpufs-batch-check: {}\n", batch.error().message), 1;
  size_t same = 0;
  for (size_t i = 0; i < batch->count(); ++i) {
    std::string got(batch->size(i), '\0');
    if (auto s = stager->CopyToHost(got.data(), batch->data(i), got.size()); !s) {
      return fmt::print(stderr, "gpufs-batch-check: {}\n", s.error().message), 1;
    }
    if (got == PlainRead(paths[i])) {
      ++same;
    } else {
      fmt::print(stderr, "gpufs-batch-check: {} differs from a plain read\n", paths[i]);
    }
  }
  const auto& c = (*reader)->counters();
  fmt::print(
      "{} of {} files identical via {} ({}); {} runs over {} blobs, {} pieces, {} copies, "
      "{} direct reads\n",
      same, paths.size(), stager->name(), stager->description(), batch->plan().runs.size(),
      batch->plan().blobs.size(), c.pieces, c.copies, c.direct_reads);
  return same == paths.size() ? 0 : 1;
}
