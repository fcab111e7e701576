// Reads of one stored object for the parsers that walk its headers (a tar archive's),
// through a window: a header read fetches the next `window` bytes, so that the headers of
// small neighbouring entries come in one request, while the bytes of large entries are
// skipped rather than downloaded.
#pragma once

#include <string>
#include <vector>

#include "dataset/format/range_reader.h"
#include "source/remote/transfer/object_store.h"

namespace gpufs::remote {

class ObjectReader : public RangeReader {
 public:
  // `object` as seen at mount: every window is checked against its ETag.
  ObjectReader(ObjectStore& store, ObjectInfo object, size_t window = 64 << 10);

  uint64_t size() const override { return object_.size; }
  const std::string& label() const override { return label_; }
  Result<size_t> ReadAt(uint64_t offset, size_t length, char* out) override;

 private:
  ObjectStore& store_;
  const ObjectInfo object_;
  const std::string label_;
  const size_t window_;
  uint64_t start_ = 0;  // of the window's bytes in the object
  std::vector<char> bytes_;
};

// A Get, waited for.
Result<size_t> GetSync(ObjectStore& store, GetRequest request);

}  // namespace gpufs::remote
