// Gzip streams read at random (being written).
#pragma once

#include <span>
#include <string_view>

#include "base/error.h"
#include "dataset/compressed/decode_plan.h"

namespace gpufs {

Status DecodeGzipRecipe(const DecodePlan& plan, const DecodeRecipe& recipe,
                        std::span<const char> stored, std::span<char> out, std::string_view label,
                        const MemberNamer& name_of);

}  // namespace gpufs
