// What the packer reads: the files of an ImageFolder tree, or the members of a tar
// archive, each as a byte range of some source file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"

namespace gpufs {

struct SourceEntry {
  std::string path;     // '/'-separated, relative to the source root
  uint32_t file = 0;    // index into PackSource::files
  uint64_t offset = 0;  // where the bytes start in that file
  uint64_t size = 0;
};

struct PackSource {
  std::string label;               // the source as the user named it, for messages
  std::vector<std::string> files;  // the files entries read from
  std::vector<SourceEntry> entries;
  bool strip_wrappers = false;  // archives may wrap the dataset in a single folder
};

// Walks an ImageFolder tree, following symbolic links as torchvision does. Every regular
// file is an entry; anything unreadable as a folder is refused, naming it.
Result<PackSource> ScanTree(const std::filesystem::path& root);

// A tree, or the members of an uncompressed tar archive (see tar.h).
Result<PackSource> ScanSource(const std::filesystem::path& source);

}  // namespace gpufs
