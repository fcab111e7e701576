// The neutral hand-off between an on-disk format reader and the catalog: what a dataset
// holds (classes, blobs, members and where each member's bytes lie), with the source line
// of each record kept so later checks can still name the line at fault.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gpufs {

struct GroupSpec {
  std::string blob;           // file name of the blob, relative to DatasetSpec::dir
  uint64_t needed_bytes = 0;  // the largest offset + size of its members
  uint32_t line = 0;          // where the group was declared in the index
};

struct MemberSpec {
  std::string path;  // tree path below the mount root, '/'-separated, normalized
  uint32_t class_id = 0;
  uint32_t group = 0;
  uint64_t offset = 0;  // byte offset of the member inside its blob
  uint64_t size = 0;
  uint32_t line = 0;
};

struct DatasetSpec {
  std::filesystem::path dir;         // folder holding the index and the blobs
  std::filesystem::path index_file;  // for messages: the file records came from
  std::vector<std::string> classes;  // class names; each is a folder at the root
  std::vector<GroupSpec> groups;
  std::vector<MemberSpec> members;
};

}  // namespace gpufs
