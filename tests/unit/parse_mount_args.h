// gpufsd mount's parser for unit tests: words after "mount", -o keys expanded as gpufsd
// expands them, parsed by the option table's CLI11 app.
#pragma once

#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli/options/mount_options.h"

namespace gpufs {

inline MountArgs ParseMountArgs(std::vector<std::string> words) {
  auto expanded = ExpandMountOptions(std::move(words));
  EXPECT_TRUE(expanded) << expanded.error().message;
  MountArgs args;
  CLI::App app;
  AddMountOptions(app, args);
  std::vector<std::string> reversed(expanded->rbegin(), expanded->rend());
  app.parse(reversed);
  return args;
}

}  // namespace gpufs
