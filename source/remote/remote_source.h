// Blobs that are objects in a store or files on an HTTP server: every read is a ranged
// GET checked against the object as the mount saw it (size, ETag), so a changed object
// fails the read instead of serving other bytes. Long reads go as parts of PartSize(),
// all in flight at once, which is how one connection's rate limit stops being the
// group's.
//
// A blob whose read just gave up at the retry deadline is read with one attempt for a
// short while: the kernel asks again straight away for a page whose readahead failed, and
// that read should not wait out a second deadline of a store that has just proved
// unreachable, yet should succeed when the store is back.
//
// With peers, a read covers whole members: a member that sticks out of it at either end is
// read whole into a buffer of its own and the asked-for part copied out, so that the store
// may send every part through peers and check each member against its SHA-256
// (member_digests.h) before the read is done.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "source/blob_source.h"
#include "source/remote/transfer/object_store.h"

namespace gpufs::remote {

class RemoteSource : public BlobSource {
 public:
  // `objects[b]` is blob b's object (name relative to the store's root, size and ETag
  // seen at mount), `expected[b]` what the dataset's index says of it. `digests` (null:
  // none) lets reads go through the store's peers. `store` must outlive the source.
  RemoteSource(ObjectStore& store, std::vector<ObjectInfo> objects, std::vector<BlobInfo> expected,
               size_t part, std::shared_ptr<const MemberDigests> digests = nullptr);

  std::string_view kind() const override;
  size_t blob_count() const override { return objects_.size(); }
  std::string Describe(uint32_t blob) const override;
  const BlobInfo* Expected(uint32_t blob) const override;
  std::string Identity(uint32_t blob) const override;
  size_t PartSize() const override { return part_; }
  // A store is latency-bound: every connection should have a part to fetch.
  unsigned PartsInFlight() const override { return store_.config().connections; }
  size_t DemandSize() const override;
  void Submit(ReadKind kind, std::vector<BlobRead> reads) override;
  nlohmann::json Stats() const override { return store_.Stats(); }

 private:
  // Reads `length` bytes of `read` as parts of whole members, which peers may serve.
  void GetWidened(BlobRead& read, size_t length);
  // `done` as a reader's: every error EIO, a give-up at the deadline noted for `blob`.
  std::function<void(Result<size_t>)> AsReadDone(uint32_t blob,
                                                 std::function<void(Result<size_t>)> done);
  // True when a read of `blob` gave up at the deadline within kRecentGiveUp. Thread-safe.
  bool RecentGiveUp(uint32_t blob) const;

  ObjectStore& store_;
  const std::vector<ObjectInfo> objects_;
  const std::vector<BlobInfo> expected_;
  const size_t part_;
  const std::shared_ptr<const MemberDigests> digests_;

  using Clock = std::chrono::steady_clock;
  mutable std::mutex mu_;
  std::map<uint32_t, Clock::time_point> give_ups_;  // guarded by mu_
};

}  // namespace gpufs::remote
