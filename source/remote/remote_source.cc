#include "source/remote/remote_source.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace gpufs::remote {
namespace {

// Whatever went wrong (an object deleted or denied since the mount), the reader sees EIO,
// the one error read() is expected to give; the message keeps the cause.
std::function<void(Result<size_t>)> AsReadError(std::function<void(Result<size_t>)> done) {
  return [done = std::move(done)](Result<size_t> r) {
    if (!r && r.error().code != EIO) r = Error{EIO, r.error().message};
    done(std::move(r));
  };
}

}  // namespace

RemoteSource::RemoteSource(ObjectStore& store, std::vector<ObjectInfo> objects,
                           std::vector<BlobInfo> expected, size_t part,
                           std::shared_ptr<const MemberDigests> digests)
    : store_(store),
      objects_(std::move(objects)),
      expected_(std::move(expected)),
      part_(part),
      digests_(std::move(digests)) {}

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
    if (digests_) {
      GetWidened(read, length);
      continue;
    }
    store_.Get(GetRequest{object.name, read.offset, length, read.buffer, object},
               AsReadError(std::move(read.done)));
  }
}

void RemoteSource::GetWidened(BlobRead& read, size_t length) {
  const ObjectInfo& object = objects_[read.blob];
  const auto [from, to] = digests_->Widen(read.blob, read.offset, read.offset + length);
  if (from == read.offset && to == read.offset + length) {
    store_.Get(
        GetRequest{object.name, read.offset, length, read.buffer, object, digests_, read.blob},
        AsReadError(std::move(read.done)));
    return;
  }
  // The members that stick out are fetched and checked too; only the asked-for bytes are
  // copied out, once the whole range has been checked.
  auto bounce = std::shared_ptr<char[]>(new char[to - from]);
  const uint64_t skip = read.offset - from;
  store_.Get(GetRequest{object.name, from, static_cast<size_t>(to - from), bounce.get(), object,
                        digests_, read.blob},
             [bounce, skip, length, buffer = read.buffer,
              done = AsReadError(std::move(read.done))](Result<size_t> r) {
               if (r) {
                 std::memcpy(buffer, bounce.get() + skip, length);
                 r = length;
               }
               done(std::move(r));
             });
}

}  // namespace gpufs::remote
