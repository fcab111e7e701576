#include "source/remote/remote_source.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpufs::remote {

RemoteSource::RemoteSource(ObjectStore& store, std::vector<ObjectInfo> objects,
                           std::vector<BlobInfo> expected, size_t part)
    : store_(store), objects_(std::move(objects)), expected_(std::move(expected)), part_(part) {}

std::string_view RemoteSource::kind() const {
  return store_.config().scheme == Scheme::kS3 ? "s3" : "http";
}

std::string RemoteSource::Describe(uint32_t blob) const {
  return blob < objects_.size() ? store_.Describe(objects_[blob].name) : "(no such blob)";
}

const BlobInfo* RemoteSource::Expected(uint32_t blob) const {
  return blob < expected_.size() ? &expected_[blob] : nullptr;
}

// The ETag changes with the bytes, whatever the index says; the size guards stores
// whose ETags are not content hashes.
std::string RemoteSource::Identity(uint32_t blob) const {
  if (blob >= objects_.size()) return {};
  return fmt::format("etag={} size={}", objects_[blob].etag, objects_[blob].size);
}

void RemoteSource::Submit(ReadKind, std::vector<BlobRead> reads) {
  for (BlobRead& read : reads) {
    if (read.blob >= objects_.size()) {
      read.done(
          Fail(EINVAL, "cannot read blob {}: the dataset has {}", read.blob, objects_.size()));
      continue;
    }
    const ObjectInfo& object = objects_[read.blob];
    // A range past the object's end reads short, as a file does; the store is asked only
    // for bytes the object holds.
    if (read.offset >= object.size || read.length == 0) {
      read.done(size_t{0});
      continue;
    }
    const auto length =
        static_cast<size_t>(std::min<uint64_t>(read.length, object.size - read.offset));
    // Whatever went wrong (an object deleted or denied since the mount), the reader
    // sees EIO, the one error read() is expected to give; the message keeps the cause.
    store_.Get(GetRequest{object.name, read.offset, length, read.buffer, object},
               [done = std::move(read.done)](Result<size_t> r) {
                 if (!r && r.error().code != EIO) r = Error{EIO, r.error().message};
                 done(std::move(r));
               });
  }
}

}  // namespace gpufs::remote
