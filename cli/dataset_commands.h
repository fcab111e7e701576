// `gpufsd pack`, `gpufsd index` and `gpufsd verify`: making and checking datasets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dataset/format/pack_writer.h"

namespace gpufs {

struct PackArgs {
  std::string source;
  std::string out;
  std::string order = "random";
  std::string splits = "auto";
  std::optional<uint64_t> group_bytes;
  PackOptions options;
};

int RunPack(PackArgs args);
int RunIndex(const std::string& source, std::optional<uint32_t> group_size, unsigned threads);
int RunVerify(const std::string& source, std::optional<uint32_t> group_size, unsigned threads);

}  // namespace gpufs
