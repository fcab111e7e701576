// gpufs-gpu-bench: bytes delivered to device memory per second for a batch of image-sized
// members, four ways in one run:
//   peak      cudaMemcpyAsync from one pinned buffer holding the batch (the bound)
//   pageable  pread of each member into malloc'ed memory + a copy from it
//   pinned    pread of each member into pinned memory + a copy from it
//   gpufs     the client library: runs by blob, read through the blob source into
//             pinned buffers, copies overlapped with reads (or cuFile where the driver
//             has GDS)
// Members come from a dataset folder through the catalog (no mount needed) or from files
// under a mount. Blob pages are read once first, so every way reads cached groups.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>

#include "dataset/open/open_dataset.h"
#include "gpu/batch.h"

namespace {

using gpufs::gpu::MemberLocation;

std::vector<MemberLocation> FromDataset(const std::string& dir, size_t count, unsigned seed) {
  auto dataset = gpufs::OpenDataset(dir, {});
  if (!dataset) {
    fmt::print(stderr, "gpufs-gpu-bench: {}\n", dataset.error().message);
    std::exit(1);
  }
  const gpufs::Catalog& catalog = dataset->catalog;
  std::vector<MemberLocation> all;
  for (gpufs::NodeId id = 0; id < catalog.node_count(); ++id) {
    if (catalog.IsDir(id)) continue;
    const auto& f = catalog.Extent(id);
    const auto& g = catalog.Group(f.group);
    all.push_back(MemberLocation{
        catalog.PathOf(id), (dataset->dir / catalog.blobs()[g.blob]).string(), f.offset, f.size});
  }
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  all.resize(std::min(count, all.size()));
  return all;
}

double BestSeconds(int repeat, const std::function<void()>& run) {
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

void Must(const gpufs::Status& s) {
  if (!s) {
    fmt::print(stderr, "gpufs-gpu-bench: {}\n", s.error().message);
    std::exit(1);
  }
}

template <typename T>
T Must(gpufs::Result<T> r) {
  if (!r) {
    fmt::print(stderr, "gpufs-gpu-bench: {}\n", r.error().message);
    std::exit(1);
  }
  return std::move(*r);
}

// The members to read: a dataset's first batch, or the files named under a mount.
std::vector<MemberLocation> Members(const std::string& dataset,
                                    const std::vector<std::string>& files, size_t batch) {
  std::vector<MemberLocation> members;
  if (!dataset.empty()) return FromDataset(dataset, batch, 1);
  for (const std::string& f : files) members.push_back(Must(gpufs::gpu::LocateMember(f)));
  return members;
}

// Seconds of the best run of each way: the pinned peak, read() with a pageable and a
// pinned copy, the gpufs client.
struct Timings {
  double peak, page, pin, ours;
};

void PrintTable(const std::vector<MemberLocation>& members, uint64_t bytes,
                const gpufs::gpu::Stager& stager, const gpufs::gpu::BatchPlan& plan,
                const Timings& t) {
  const auto [peak, page, pin, ours] = t;
  const double mean_kb = bytes / 1e3 / members.size();
  fmt::print("{} members, mean {:.0f} KB, {:.1f} MB; {} ({}); {} runs over {} blobs\n",
             members.size(), mean_kb, bytes / 1e6, stager.name(), stager.description(),
             plan.runs.size(), plan.blobs.size());
  fmt::print("{:<34}{:>10}{:>12}{:>14}\n", "", "GB/s", "x peak", "x pageable");
  for (const auto& [name, seconds] : {std::pair{"pinned cudaMemcpy peak", peak},
                                      {"read() + pageable copy", page},
                                      {"read() + pinned copy", pin},
                                      {"gpufs client", ours}}) {
    fmt::print("{:<34}{:>10.2f}{:>12.2f}{:>14.2f}\n", name, bytes / seconds / 1e9, peak / seconds,
               page / seconds);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bytes to device memory per second: gpufs client vs read()+copy vs pinned peak"};
  std::string dataset;
  std::vector<std::string> files;
  size_t batch = 256;
  int repeat = 5;
  bool host = false;
  app.add_option("--dataset", dataset, "a dataset folder (read through its catalog, no mount)");
  app.add_option("FILES", files, "files under a gpufs mount (instead of --dataset)");
  app.add_option("--batch", batch, "members per batch")->capture_default_str();
  app.add_option("--repeat", repeat, "runs of each way; the best counts")->capture_default_str();
  app.add_flag("--host", host, "host memory in place of a GPU (checks the harness only)");
  CLI11_PARSE(app, argc, argv);

  auto stager = host ? gpufs::gpu::MakeHostStager() : gpufs::gpu::MakeDeviceStager();
  if (!host && !stager->on_device()) {
    fmt::print("gpufs-gpu-bench: skipped: {}\n", stager->description());
    return 77;
  }
  const std::vector<MemberLocation> members = Members(dataset, files, batch);
  auto reader = Must(gpufs::gpu::BatchReader::Create(*stager));
  const gpufs::gpu::BatchPlan plan = gpufs::gpu::PlanBatch(members);
  uint64_t bytes = 0;
  for (const auto& m : members) bytes += m.size;
  char* device = static_cast<char*>(Must(stager->AllocateDevice(plan.output_bytes)));
  char* pinned = static_cast<char*>(Must(stager->AllocatePinned(plan.output_bytes)));
  std::vector<char> pageable(plan.output_bytes);
  const auto stream = Must(stager->CreateStream());
  std::vector<int> fds;
  for (const auto& m : members) fds.push_back(open(m.blob.c_str(), O_RDONLY | O_CLOEXEC));

  auto read_then_copy = [&](char* into) {
    for (size_t i = 0; i < members.size(); ++i) {
      char* at = into + plan.destination[i];
      if (pread(fds[i], at, members[i].size, static_cast<off_t>(members[i].offset)) < 0) {
        std::exit(1);
      }
      Must(stager->CopyToDevice(device + plan.destination[i], at, members[i].size, stream));
    }
    Must(stager->Synchronize(stream));
  };
  read_then_copy(pinned);  // warms the blobs' pages
  const double peak = BestSeconds(repeat, [&] {
    Must(stager->CopyToDevice(device, pinned, plan.output_bytes, stream));
    Must(stager->Synchronize(stream));
  });
  const double page = BestSeconds(repeat, [&] { read_then_copy(pageable.data()); });
  const double pin = BestSeconds(repeat, [&] { read_then_copy(pinned); });
  const double ours = BestSeconds(repeat, [&] { Must(reader->ReadInto(plan, device)); });

  PrintTable(members, bytes, *stager, plan, {peak, page, pin, ours});
  for (int fd : fds) close(fd);
  stager->DestroyStream(stream);
  stager->FreePinned(pinned);
  stager->FreeDevice(device);
  return 0;
}
