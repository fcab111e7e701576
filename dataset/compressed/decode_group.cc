#include "dataset/compressed/decode_group.h"

#include <fmt/format.h>

#include <algorithm>

#include "dataset/compressed/gzip.h"
#include "dataset/compressed/zip.h"

namespace gpufs {

Status DecodeGroup(const DecodePlan& plan, const DecodeRecipe& recipe, std::span<const char> stored,
                   std::span<char> out, std::string_view label, const MemberNamer& name_of) {
  if (stored.size() != recipe.stored_size || out.size() != recipe.size) {
    return Fail(EINVAL, "{}: a group of {} bytes from {} stored ones was asked for as {} from {}",
                label, recipe.size, recipe.stored_size, out.size(), stored.size());
  }
  switch (recipe.kind) {
    case DecodeKind::kZip:
      return DecodeZipRecipe(plan, recipe, stored, out, label, name_of);
    case DecodeKind::kGzip:
      return DecodeGzipRecipe(plan, recipe, stored, out, label, name_of);
    case DecodeKind::kAsStored:
      std::copy(stored.begin(), stored.end(), out.begin());
      return Ok{};
  }
  return Fail(EINVAL, "{}: a group of an unknown kind", label);
}

}  // namespace gpufs
