// How the command-line tools treat their usage, alike: --help and --version exit 0; a
// usage error prints what CLI11 found, for an option nobody declared the nearest one that
// exists, and exits 2 (failures of the work itself exit 1).
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace gpufs {

inline constexpr int kUsageError = 2;

// The word of `words` nearest to `word`, if one is near enough to be a typo of it; else
// empty.
std::string NearestWord(const std::string& word, const std::vector<std::string>& words);

// Parses argv into `app`; nullopt to go on, else the status to exit with.
std::optional<int> ParseUsage(CLI::App& app, int argc, char** argv);

}  // namespace gpufs
