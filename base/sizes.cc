#include "base/sizes.h"

#include <cmath>

#include <fmt/format.h>

namespace gpufs {
namespace {

constexpr const char* kIec[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
constexpr const char* kSi[] = {"B", "kB", "MB", "GB", "TB", "PB"};
constexpr const char* kLetters[] = {"", "K", "M", "G", "T", "P"};

std::string Exact(uint64_t bytes, const SizeStyle& style) {
  if (bytes == 0) return "0";
  const int largest = static_cast<int>(style.largest);
  for (const auto& [units, base] : {std::pair{kIec, 1024u}, std::pair{kSi, 1000u}}) {
    uint64_t count = bytes;
    int unit = 0;
    while (unit < largest && count >= base && count % base == 0) {
      count /= base;
      ++unit;
    }
    if (unit > 0 || base == 1000) return fmt::format("{}{}{}", count, style.separator, units[unit]);
  }
  return "";
}

}  // namespace

std::string FormatSize(uint64_t bytes, const SizeStyle& style) {
  if (style.exact) return Exact(bytes, style);
  int unit = 0;
  if (style.unit) {
    unit = static_cast<int>(*style.unit);
  } else {
    const int largest = static_cast<int>(style.largest);
    for (uint64_t left = bytes; left >= 1024 && unit < largest; left /= 1024) ++unit;
  }
  const char* name = (style.letters ? kLetters : kIec)[unit];
  const uint64_t scale = uint64_t{1} << (10 * unit);
  if (style.rounding != SizeStyle::kNearest) {
    const bool up = style.rounding == SizeStyle::kUp && bytes % scale != 0;
    return fmt::format("{}{}{}", bytes / scale + up, style.separator, name);
  }
  const double value = static_cast<double>(bytes) / static_cast<double>(scale);
  const bool whole = unit == 0 || value >= 100 || value == std::floor(value);
  return fmt::format("{:.{}f}{}{}", value, style.trim && whole ? 0 : style.decimals,
                     style.separator, name);
}

}  // namespace gpufs
