#include "dataset/compressed/decode_plan.h"

#include <algorithm>

namespace gpufs {

const DecodeRecipe* DecodePlan::Find(uint64_t offset) const {
  auto after = std::upper_bound(recipes.begin(), recipes.end(), offset,
                                [](uint64_t o, const DecodeRecipe& r) { return o < r.offset; });
  if (after == recipes.begin()) return nullptr;
  const DecodeRecipe& r = *std::prev(after);
  return offset - r.offset < r.size ? &r : nullptr;
}

}  // namespace gpufs
