// Fuzzes the control protocol that gpufs-stat speaks to the daemon: HandleControlRequest
// on a request line, over a small dataset served through a group cache in which one group
// is resident and one file is known to the kernel, so every branch of a residency reply
// has something to report.
//
// Whatever the request, the reply is one JSON object on its first line (the answer or an
// error), then only residency file lines "<p|-><k|-> <size> <group> <class> <path>".
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/arena.h"
#include "cache/group_cache.h"
#include "dataset/catalog.h"
#include "dataset/catalog_builder.h"
#include "fs/control.h"
#include "fs/filesystem.h"
#include "source/blob_files.h"
#include "source/io_engine.h"
#include "source/local_source.h"
#include "tests/fuzz/catalog_invariants.h"

namespace gpufs::fuzz {
namespace {

// Two groups of files with awkward names, in blob files of a private temporary folder
// (the daemon opens blobs only beneath their folder, never through /proc's magic links),
// removed when the fuzzer exits.
class ServedDataset {
 public:
  ServedDataset() {
    char dir[] = "/tmp/gpufs-fuzz-control-XXXXXX";
    Require(mkdtemp(dir) != nullptr, "cannot make a temporary folder");
    dir_ = dir;
    DatasetSpec spec;
    spec.index_file = "control-fuzz";
    spec.classes = {"a", "b b", "c,d"};
    struct File {
      const char* path;
      uint32_t class_id;
      uint32_t group;
      uint64_t size;
    };
    const File files[] = {{"a/x.jpg", 0, 0, 5000},
                          {"a/sub/y z.jpg", 0, 0, 100},
                          {"b b/w.jpg", 1, 1, 9000},
                          {"c,d/v,1.jpg", 2, 1, 1}};
    std::vector<std::string> contents(2);
    for (const File& f : files) {
      spec.members.push_back(
          MemberSpec{f.path, f.class_id, f.group, contents[f.group].size(), f.size, 0, 0});
      contents[f.group].append(f.size, static_cast<char>('a' + spec.members.size()));
    }
    for (size_t g = 0; g < contents.size(); ++g) {
      const std::string name = "blob-" + std::to_string(g);
      std::ofstream(dir_ / name, std::ios::binary) << contents[g];
      spec.groups.push_back(GroupSpec{name, 0, contents[g].size(), 0});
    }
    catalog_ = std::make_unique<Catalog>(std::move(*CatalogFromSpec(spec)));
    CheckCatalog(*catalog_);
    blobs_ = std::make_unique<BlobFiles>(dir_, catalog_->blobs());
    source_ = std::make_unique<LocalSource>(*blobs_, engine_);
    arena_ = std::move(*PinnedArena::Create(1 << 20));
    cache_ = std::make_unique<GroupCache>(*catalog_, *source_, *arena_,
                                          MakePolicy("lru", {2, 2}, 4), CacheOptions{"lru", 0, 0});
    fs_ = std::make_unique<Filesystem>(*catalog_, *source_, ServeOptions{}, cache_.get());
    const NodeId w = *catalog_->FindPath("b b/w.jpg");
    Require(fs_->Fetch(Filesystem::InoOf(w), 0, 1 << 20).ok(), "cannot read b b/w.jpg");
    fs_->Remember(Filesystem::InoOf(*catalog_->FindPath("a/x.jpg")));
  }

  ~ServedDataset() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  const Filesystem& fs() const { return *fs_; }

 private:
  std::filesystem::path dir_;
  PreadEngine engine_{1};
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<BlobFiles> blobs_;
  std::unique_ptr<LocalSource> source_;
  std::unique_ptr<PinnedArena> arena_;
  std::unique_ptr<GroupCache> cache_;
  std::unique_ptr<Filesystem> fs_;
};

// "<p|-><k|-><d|-> ..." (fs/control.h).
bool IsFileLine(std::string_view line) {
  return line.size() >= 4 && (line[0] == 'p' || line[0] == '-') &&
         (line[1] == 'k' || line[1] == '-') && (line[2] == 'd' || line[2] == '-') && line[3] == ' ';
}

void CheckReply(std::string_view reply) {
  Require(!reply.empty() && reply.back() == '\n', "the reply is not whole lines");
  const size_t end = reply.find('\n');
  const auto first = nlohmann::json::parse(reply.substr(0, end), nullptr, false);
  Require(!first.is_discarded() && first.is_object(), "the reply's first line is not an object");
  for (size_t pos = end + 1; pos < reply.size();) {
    const size_t eol = reply.find('\n', pos);
    Require(IsFileLine(reply.substr(pos, eol - pos)), "a reply line is not a file line", pos);
    pos = eol + 1;
  }
}

}  // namespace
}  // namespace gpufs::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gpufs;
  static const fuzz::ServedDataset dataset;
  std::string reply;
  HandleControlRequest(dataset.fs(), std::string_view(reinterpret_cast<const char*>(data), size),
                       [&reply](std::string_view piece) { reply += piece; });
  fuzz::CheckReply(reply);
  return 0;
}
