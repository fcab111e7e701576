// How gpufsd's commands fail: the message on stderr, naming the tool, and exit status 1
// (usage errors are 2, cli/options/usage.h).
#pragma once

#include <fmt/format.h>

#include <cstdio>

#include "base/error.h"
#include "dataset/printable.h"

namespace gpufs {

inline constexpr int kFailed = 1;

// The message may name a dataset's or another user's names: escaped for the terminal.
inline int Refuse(const Error& error) {
  fmt::print(stderr, "gpufsd: {}\n", PrintableLine(error.message));
  return kFailed;
}

}  // namespace gpufs
