// Making a group's decoded bytes from the archive's stored ones, by its recipe's kind.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "base/error.h"
#include "dataset/compressed/decode_plan.h"

namespace gpufs {

// Makes `recipe`'s `recipe.size` decoded bytes in `out` from `stored`, the archive's bytes
// [recipe.stored_offset, recipe.stored_offset + recipe.stored_size). An error names
// `label` (the archive), the member where one is known (through `name_of`, which may be
// empty), and what is wrong: damaged data, a CRC-32 that does not match, output shorter
// than the plan says.
Status DecodeGroup(const DecodePlan& plan, const DecodeRecipe& recipe, std::span<const char> stored,
                   std::span<char> out, std::string_view label, const MemberNamer& name_of = {});

}  // namespace gpufs
