// Whole-file reads and crash-safe whole-file writes, shared by the format readers and
// writers.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "fs/error.h"

namespace gpufs {

Result<std::string> ReadWholeFile(const std::filesystem::path& path);

// Writes `bytes` to a temporary file beside `path`, fsyncs it, renames it over `path` and
// fsyncs the folder: readers see the old file or the whole new one, never a part.
Status WriteFileAtomically(const std::filesystem::path& path, std::string_view bytes);

// Writes all of `bytes` at the current position of `fd`; `path` names it in errors.
Status WriteAll(int fd, std::string_view bytes, const std::filesystem::path& path);

// fsync of a folder, so that a rename or create in it survives a crash.
Status SyncFolder(const std::filesystem::path& folder);

}  // namespace gpufs
