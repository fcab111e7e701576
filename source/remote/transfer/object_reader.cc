#include "source/remote/transfer/object_reader.h"

#include <algorithm>
#include <cstring>
#include <future>

namespace gpufs::remote {

Result<size_t> GetSync(ObjectStore& store, GetRequest request) {
  std::promise<Result<size_t>> promise;
  auto answer = promise.get_future();
  store.Get(std::move(request), [&promise](Result<size_t> r) { promise.set_value(std::move(r)); });
  return answer.get();
}

ObjectReader::ObjectReader(ObjectStore& store, ObjectInfo object, size_t window)
    : store_(store),
      object_(std::move(object)),
      label_(store.Describe(object_.name)),
      window_(window) {}

Result<size_t> ObjectReader::ReadAt(uint64_t offset, size_t length, char* out) {
  if (offset >= object_.size) return size_t{0};
  length = static_cast<size_t>(std::min<uint64_t>(length, object_.size - offset));
  const bool inside = offset >= start_ && offset + length <= start_ + bytes_.size();
  if (!inside) {
    const auto fetch =
        static_cast<size_t>(std::min<uint64_t>(std::max(window_, length), object_.size - offset));
    bytes_.resize(fetch);
    auto got = GetSync(store_, GetRequest{object_.name, offset, fetch, bytes_.data(), object_});
    if (!got) {
      bytes_.clear();
      return got.error();
    }
    start_ = offset;
  }
  std::memcpy(out, bytes_.data() + (offset - start_), length);
  return length;
}

}  // namespace gpufs::remote
