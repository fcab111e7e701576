#include "source/remote/remote_source.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "source/remote/transfer/gather.h"

namespace gpufs::remote {
namespace {

// The largest member a read through peers fetches whole for a part of it: a 128 KiB read
// of a 1 MiB member fetches eight times what it needs, once, where the peer can serve it.
constexpr uint64_t kMaxWholeMember = 1 << 20;

// Long enough for the kernel's second read of a page whose readahead failed, which comes
// at once; short enough that reads after an outage go to the store again.
constexpr auto kRecentGiveUp = std::chrono::seconds(1);

// What a waiting reader's read of a group asks for: a typical image's blocks. Through a
// 20 ms, 80 MB/s link 256 KiB costs 23 ms against 125 ms for an 8 MiB part; much smaller
// and the requests per file grow with nothing gained on the round trip.
constexpr size_t kDemandBytes = 256 << 10;

}  // namespace

// Whatever went wrong (an object deleted or denied since the mount), the reader sees EIO,
// the one error read() is expected to give; the message keeps the cause.
std::function<void(Result<size_t>)> RemoteSource::AsReadDone(
    uint32_t blob, std::function<void(Result<size_t>)> done) {
  return [this, blob, done = std::move(done)](Result<size_t> r) {
    if (!r && r.error().code == ETIMEDOUT) {
      std::lock_guard lock(mu_);
      give_ups_.insert_or_assign(blob, Clock::now());
    }
    if (!r && r.error().code != EIO) r = Error{EIO, r.error().message};
    done(std::move(r));
  };
}

bool RemoteSource::RecentGiveUp(uint32_t blob) const {
  std::lock_guard lock(mu_);
  auto it = give_ups_.find(blob);
  return it != give_ups_.end() && Clock::now() - it->second <= kRecentGiveUp;
}

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

size_t RemoteSource::DemandSize() const {
  return part_ ? std::min(part_, kDemandBytes) : kDemandBytes;
}

void RemoteSource::Submit(ReadKind kind, std::vector<BlobRead> reads) {
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
    read.urgent = read.urgent || kind == ReadKind::kMember;
    if (RecentGiveUp(read.blob)) {
      store_.Get(GetRequest{object.name, read.offset, length, read.buffer, object, nullptr, 0, true,
                            read.urgent},
                 AsReadDone(read.blob, std::move(read.done)));
      continue;
    }
    if (digests_) {
      GetWidened(read, length);
      continue;
    }
    store_.Get(GetRequest{object.name, read.offset, length, read.buffer, object, nullptr, 0, false,
                          read.urgent},
               AsReadDone(read.blob, std::move(read.done)));
  }
}

// The range less the members that stick out at either end is read straight into the
// buffer; each member that sticks out is read whole into a buffer of its own (checked like
// the rest) and the asked-for part copied out. A read through peers thus never bounces
// more than two members, of kMaxWholeMember bytes at most.
void RemoteSource::GetWidened(BlobRead& read, size_t length) {
  const ObjectInfo& object = objects_[read.blob];
  const uint64_t start = read.offset;
  const uint64_t end = start + length;
  const auto head = digests_->Straddling(read.blob, start);
  const auto tail = digests_->Straddling(read.blob, end);
  if (!head && !tail) {
    store_.Get(GetRequest{object.name, start, length, read.buffer, object, digests_, read.blob,
                          false, read.urgent},
               AsReadDone(read.blob, std::move(read.done)));
    return;
  }
  std::vector<std::pair<uint64_t, uint64_t>> sticking;
  if (head) sticking.push_back(*head);
  if (tail && tail != head) sticking.push_back(*tail);
  const uint64_t middle_from = head ? std::min(head->second, end) : start;
  const uint64_t middle_to = tail ? std::max(tail->first, middle_from) : end;
  const bool middle = middle_from < middle_to;
  auto parts = std::make_shared<Gather>(sticking.size() + (middle ? 1 : 0), length,
                                        AsReadDone(read.blob, std::move(read.done)));
  const auto done = [parts](Result<size_t> r) { parts->BlockDone(r); };
  if (middle) {
    store_.Get(GetRequest{object.name, middle_from, static_cast<size_t>(middle_to - middle_from),
                          read.buffer + (middle_from - start), object, digests_, read.blob, false,
                          read.urgent},
               done);
  }
  for (const auto& [from, to] : sticking) {
    const uint64_t copy_from = std::max(from, start);
    const uint64_t copy_to = std::min(to, end);
    // A large member is not fetched whole for a small part of it: that part comes from the
    // store, which needs no check.
    if (to - from > kMaxWholeMember) {
      store_.Get(
          GetRequest{object.name, copy_from, static_cast<size_t>(copy_to - copy_from),
                     read.buffer + (copy_from - start), object, nullptr, 0, false, read.urgent},
          done);
      continue;
    }
    auto bounce = std::shared_ptr<char[]>(new char[to - from]);
    store_.Get(GetRequest{object.name, from, static_cast<size_t>(to - from), bounce.get(), object,
                          digests_, read.blob, false, read.urgent},
               [parts, bounce, out = read.buffer + (copy_from - start), skip = copy_from - from,
                n = copy_to - copy_from](Result<size_t> r) {
                 if (r) std::memcpy(out, bounce.get() + skip, n);
                 parts->BlockDone(r);
               });
  }
}

}  // namespace gpufs::remote
