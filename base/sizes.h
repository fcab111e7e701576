// Sizes for a person to read, written one way for every program and message: rounded in
// the largest unit that fits ("23.4 GiB"), in one unit ("512MiB"), or exact in the form a
// command line takes back ("4MiB", "1GB").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gpufs {

// A unit's power: of 1024 for IEC (KiB, MiB, ...), of 1000 for SI (kB, MB, ...).
enum class SizeScale { kOne, kKilo, kMega, kGiga, kTera, kPeta };

// How FormatSize writes a size; the default is "23.4 GiB", "512 MiB", "100 B".
struct SizeStyle {
  // Whole and exact: in the largest IEC unit that divides it, else the largest SI one
  // ("4MiB", "1GB", "1001B"; 0 is "0"), up to `largest`. `unit`, `decimals`, `trim`,
  // `rounding` and `letters` are for the rounded forms only.
  bool exact = false;
  // Every size in this IEC unit; none: the largest that leaves at least 1, up to `largest`.
  std::optional<SizeScale> unit = std::nullopt;
  SizeScale largest = SizeScale::kPeta;
  int decimals = 1;  // digits after the point
  bool trim = true;  // none in bytes, from 100 up, or for a whole number
  // kUp, kDown: to a whole number of the unit (no decimals), not the nearest.
  enum Rounding { kNearest, kUp, kDown } rounding = kNearest;
  bool letters = false;         // vmtouch's units: "12M", "4K", bytes bare
  const char* separator = " ";  // between the number and its unit
};

std::string FormatSize(uint64_t bytes, const SizeStyle& style = {});

}  // namespace gpufs
