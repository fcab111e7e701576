// The neutral hand-off between an on-disk format reader and the catalog: what a dataset
// holds (classes, blobs, members and where each member's bytes lie), with the source line
// of each record kept so later checks can still name the line at fault.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace gpufs {

// A group is the unit read together: a byte range of a blob file. A mytar or native blob
// holds one group; a tar archive is one blob holding many.
struct GroupSpec {
  std::string blob;     // file name of the blob, relative to DatasetSpec::dir
  uint64_t offset = 0;  // where the group starts in the blob
  uint64_t size = 0;    // up to the end of its last member
  uint32_t line = 0;    // where the group was declared in the index
};

struct MemberSpec {
  std::string path;  // tree path below the mount root, '/'-separated, normalized
  uint32_t class_id = 0;
  uint32_t group = 0;
  uint64_t offset = 0;  // byte offset of the member inside its blob
  uint64_t size = 0;
  uint64_t checksum = 0;  // XXH3-64 of the member's bytes; 0 when the format has none
  uint32_t line = 0;
  std::array<uint8_t, 32> sha256{};  // of the member's bytes, when DatasetSpec::has_sha256
};

struct DatasetSpec {
  std::filesystem::path dir;         // folder holding the index and the blobs
  std::filesystem::path index_file;  // for messages: the file records came from
  std::vector<std::string> classes;  // class names, indexed by MemberSpec::class_id
  // Class folders that exist even when empty: "<class>", or "<split>/<class>" in a dataset
  // with splits. When empty, each class is a folder at the root.
  std::vector<std::string> folders;
  bool has_checksums = false;
  bool has_sha256 = false;
  std::vector<GroupSpec> groups;
  std::vector<MemberSpec> members;
};

}  // namespace gpufs
