// What to tell a user whose SRC gpufs cannot open, beyond what failed: the most natural
// first mistakes (an ImageFolder tree, a URL of a scheme gpufs does not read, "s3:/b")
// answered with what to do instead.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace gpufs {

// Whether `source` starts with a URL scheme ("ftp://", "s3:/"), so that it names no path.
bool HasUrlScheme(std::string_view source);

// For a `source` with a scheme that is not a path: which sources gpufs reads, and the
// likely intended one ("s3:/b/x": s3://b/x).
std::string UrlAdvice(std::string_view source);

// For a folder that is no dataset: when it holds images in class folders (with or without
// splits above them), how to serve it (pack it, or mount a tar of it); else empty.
std::string TreeAdvice(const std::filesystem::path& folder);

}  // namespace gpufs
