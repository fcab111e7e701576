#include "gpu/local_blobs.h"

#include <algorithm>

namespace gpufs::gpu {
namespace {

// A blob's folder and its name there; a bare name lies in the working folder.
std::pair<std::filesystem::path, std::string> Split(const std::string& path) {
  const std::filesystem::path p(path);
  std::filesystem::path dir = p.parent_path();
  return {dir.empty() ? std::filesystem::path(".") : dir, p.filename().string()};
}

}  // namespace

// One io_uring thread keeps `depth` reads in flight; pread needs a thread per read for it.
LocalBlobs::LocalBlobs(unsigned depth)
    : engine_(MakeIoEngine(UringOptions{.threads = 1, .queue_depth = std::max(depth, 4u)},
                           std::max(depth, 1u))) {}

LocalBlobs::~LocalBlobs() {
  for (auto& [dir, folder] : folders_) folder.source.reset();  // before the files it reads
}

std::vector<BlobRef> LocalBlobs::Find(const std::vector<std::string>& paths) {
  std::map<std::filesystem::path, std::vector<std::string>> unknown;
  for (const std::string& path : paths) {
    auto [dir, name] = Split(path);
    auto it = folders_.find(dir);
    if (it == folders_.end() || !it->second.ids.contains(name)) unknown[dir].push_back(name);
  }
  for (const auto& [dir, names] : unknown) Add(folders_[dir], dir, names);
  std::vector<BlobRef> refs;
  for (const std::string& path : paths) {
    auto [dir, name] = Split(path);
    Folder& folder = folders_.at(dir);
    refs.push_back(BlobRef{folder.source.get(), folder.ids.at(name)});
  }
  return refs;
}

// Replaces the folder's files and source by ones that also hold `names`. Descriptors of
// the old ones close; the blobs are reopened on their next read.
void LocalBlobs::Add(Folder& folder, const std::filesystem::path& dir,
                     const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    auto [it, added] = folder.ids.try_emplace(name, static_cast<uint32_t>(folder.names.size()));
    if (added) folder.names.push_back(name);
  }
  folder.source.reset();
  folder.files = std::make_unique<BlobFiles>(dir, folder.names);
  folder.source = std::make_unique<LocalSource>(*folder.files, *engine_);
}

Result<int> LocalBlobs::Fd(const std::string& path) {
  auto [dir, name] = Split(path);
  auto folder = folders_.find(dir);
  if (folder == folders_.end() || !folder->second.ids.contains(name)) {
    return Fail(EINVAL, "cannot open blob {}: no batch has named it", path);
  }
  return folder->second.files->Fd(folder->second.ids.at(name));
}

}  // namespace gpufs::gpu
