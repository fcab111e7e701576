// Random reads of one file or stored object, for the parsers that walk an archive's
// headers: the same walk serves an archive on a local disk and one in an object store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "base/error.h"

namespace gpufs {

class RangeReader {
 public:
  virtual ~RangeReader() = default;
  virtual uint64_t size() const = 0;
  // How messages name what is read: a path or a URL.
  virtual const std::string& label() const = 0;
  // Up to `length` bytes at `offset`; fewer only where the file ends.
  virtual Result<size_t> ReadAt(uint64_t offset, size_t length, char* out) = 0;
};

// A reader of the local file at `path`.
Result<std::unique_ptr<RangeReader>> OpenFileReader(const std::filesystem::path& path);

}  // namespace gpufs
