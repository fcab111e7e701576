#include "dataset/path_arena.h"

#include <algorithm>
#include <cstring>
#include <iterator>

namespace gpufs {

std::string_view PathArena::Add(std::string_view path) {
  if (blocks_.empty() || path.size() > kBlock - used_) {
    const size_t size = std::max(kBlock, path.size());
    blocks_.push_back(std::make_unique_for_overwrite<char[]>(size));
    used_ = 0;
    if (size > kBlock) {  // a block of its own, and the next path starts another
      std::memcpy(blocks_.back().get(), path.data(), path.size());
      used_ = kBlock;
      return {blocks_.back().get(), path.size()};
    }
  }
  char* at = blocks_.back().get() + used_;
  std::memcpy(at, path.data(), path.size());
  used_ += path.size();
  return {at, path.size()};
}

void PathArena::Append(PathArena&& other) {
  if (other.blocks_.empty()) return;
  std::move(other.blocks_.begin(), other.blocks_.end(), std::back_inserter(blocks_));
  used_ = other.used_;
  other.blocks_.clear();
  other.used_ = kBlock;
}

}  // namespace gpufs
