// Sizes as a person writes them on a command line or in fstab: "8GiB", "500MB", "64KiB".
// IEC units are powers of two (KiB, MiB, GiB, TiB), SI units powers of ten (kB, MB, GB,
// TB), so that "1GB" never silently means 2^30. A lone letter ("8G", "8g", "64k") could be
// either and is refused with both spellings; a bare number is bytes, and one too small to
// be meant ("--cache-size 10", likely 10 GiB) is refused with a hint.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.h"

namespace gpufs {

// The bytes `text` names; EINVAL with the reason (not naming the option). A bare number
// other than 0 below `least_bare` is refused.
Result<uint64_t> ParseSize(std::string_view text, uint64_t least_bare);

// A CLI11 transform that turns a size into its byte count, refusing as ParseSize does.
CLI::Validator SizeValue(uint64_t least_bare = 4096);

}  // namespace gpufs
