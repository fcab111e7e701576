// An append-only store of paths: the tar listing's and the catalog builder's.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

namespace gpufs {

// The bytes of many paths in blocks that never move, so that views of them stay valid as
// more are added: an archive of 14 M members lists them with no string (and no allocation)
// of their own.
class PathArena {
 public:
  std::string_view Add(std::string_view path);
  // Takes over `other`'s blocks; views of them stay valid.
  void Append(PathArena&& other);

 private:
  static constexpr size_t kBlock = 1u << 20;
  std::vector<std::unique_ptr<char[]>> blocks_;
  size_t used_ = kBlock;  // in the last block
};

}  // namespace gpufs
