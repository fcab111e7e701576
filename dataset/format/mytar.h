// Reader of the "mytar" layout written by the original grouping tool (group-needle.py):
//
//   SRC/<G>/metadata.txt           the text index
//   SRC/<G>/filegroup-<i>.mytar    blob i: its members' bytes, concatenated
//
// metadata.txt holds, one record per line:
//   C                                     number of classes
//   <class name>                          C lines, sorted
//   filegroup-<i>.mytar,<n>               a group header, then its n members:
//   <j>,<class>,<offset>,<size>,<path>    j counts 0..n-1; path is the original file
//
// Original paths are those of the source ImageFolder (".../train/<class>/<sub>/<file>").
// The tree shows each member at "<class>/<sub>/<file>": the part of the path below its
// class folder. The dataset root (the prefix before "/<class>/") is shared by every line;
// it is inferred as the shortest root all lines agree on, which makes a subfolder named
// like its class harmless. Class names may contain commas: the class field is matched
// against the declared classes rather than split blindly.
//
// Every malformed record is refused with the file, the line and the reason; nothing is
// mounted from a dataset that fails any check.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.h"
#include "dataset/dataset_spec.h"

namespace gpufs {

inline constexpr std::string_view kMytarIndexName = "metadata.txt";

// Parses the text of a metadata.txt. `label` names the file in messages.
Result<DatasetSpec> ParseMytarIndex(std::string_view text, const std::string& label);

// Reads and parses DIR/metadata.txt, then checks that every blob exists, is a regular
// file and is long enough for its members.
Result<DatasetSpec> ReadMytarDataset(const std::filesystem::path& dir);

// Finds the folder holding metadata.txt: `src` itself, or the one group-size folder below
// it. With several group-size folders, `group_size` picks one; without it, the error
// lists those that exist.
Result<std::filesystem::path> ResolveMytarDir(const std::filesystem::path& src,
                                              std::optional<uint32_t> group_size);

}  // namespace gpufs
