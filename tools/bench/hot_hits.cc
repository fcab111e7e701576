// Hits per second on GroupCache::Read with the whole dataset cached, by 1 to N threads: the
// group cache's hot path alone, with no FUSE and no kernel in the way. Built against a
// tree's own headers and libraries, so that two builds of the cache can be compared:
//
//   tools/bench/hot_hits.sh [ROOT [BUILD]]   (prints "threads hits/s")
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/group_cache.h"
#include "dataset/catalog_builder.h"
#include "source/local_source.h"

namespace gpufs {
namespace {

constexpr uint32_t kGroups = 64;
constexpr uint32_t kMembers = 64;
constexpr size_t kMemberBytes = 4096;

int Run(unsigned most_threads, double seconds) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("gpufs-hot-hits-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  DatasetSpec spec;
  spec.index_file = "bench";
  spec.classes = {"c"};
  const std::string bytes(kMembers * kMemberBytes, 'x');
  for (uint32_t g = 0; g < kGroups; ++g) {
    const std::string blob = "blob-" + std::to_string(g);
    for (uint32_t m = 0; m < kMembers; ++m) {
      spec.members.push_back(MemberSpec{"c/" + std::to_string(g) + "-" + std::to_string(m), 0, g,
                                        m * kMemberBytes, kMemberBytes, 0, 0});
    }
    spec.groups.push_back(GroupSpec{blob, 0, bytes.size(), 0});
    std::ofstream(dir / blob, std::ios::binary) << bytes;
  }
  Catalog catalog = std::move(*CatalogFromSpec(spec));
  BlobFiles blobs(dir, catalog.blobs());
  PreadEngine engine(2);
  LocalSource source(blobs, engine);
  auto arena = std::move(*PinnedArena::Create(2 * kGroups * bytes.size()));
  GroupCache cache(catalog, source, *arena,
                   MakePolicy("consume-once", GroupSizes(kGroups, kMembers), kGroups * kMembers),
                   CacheOptions{"consume-once", 0, 0});
  std::vector<NodeId> files;
  for (const MemberSpec& m : spec.members) files.push_back(*catalog.FindPath(m.path));
  for (NodeId f : files) (void)cache.Read(f, 0, kMemberBytes);  // everything cached
  for (unsigned threads = 1; threads <= most_threads; threads *= 2) {
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> total{0};
    std::vector<std::thread> readers;
    for (unsigned t = 0; t < threads; ++t) {
      readers.emplace_back([&, t] {
        std::mt19937 random(t);
        uint64_t done = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          auto got = cache.Read(files[random() % files.size()], 0, kMemberBytes);
          done += got.ok();
        }
        total += done;
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (std::thread& r : readers) r.join();
    std::printf("%u %.0f\n", threads, static_cast<double>(total.load()) / seconds);
  }
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace gpufs

int main(int argc, char** argv) {
  return gpufs::Run(argc > 1 ? std::atoi(argv[1]) : 8, argc > 2 ? std::atof(argv[2]) : 1.0);
}
