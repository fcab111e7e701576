// A blob source that serves a compressed archive's decoded space (decode_plan.h) over the
// source that holds the archive's stored bytes.
//
// A read of a blob with a plan is cut where the plan's ranges meet: bytes of the archive
// served as they lie go to the stored source as they are (into the caller's buffer, no
// copy); bytes of a decoded group come from that group, decoded whole, once, when the first
// read of it arrives: its stored range is read in one ranged read and decoded on a decoding
// thread, and every read of it waiting then is answered from the one result. The group
// cache reads a group as several blocks, so a decoded group is kept until the cache's reads
// have copied each of its bytes out once, or, when groups come faster than they are read,
// while the least recently used fit in `keep_bytes`. Bytes between the plan's ranges belong
// to no member and read as zeros.
//
// A group that cannot be decoded (damaged or changed bytes, a CRC-32 that does not match)
// fails every read of it with the decoder's message, which names the archive and member;
// it is tried again on the next read, since the stored read may have been what failed.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "dataset/compressed/decode_plan.h"
#include "source/blob_source.h"

namespace gpufs {

struct DecodedOptions {
  size_t keep_bytes = 256u << 20;  // decoded groups kept after their reads were answered
  unsigned threads = 0;            // decoding threads; 0: one per core
};

class DecodedSource : public BlobSource {
 public:
  // `plans` name the blobs of `stored` that are served decoded (each blob at most once);
  // `name_of(blob, offset)` names the member at a decoded offset, for messages.
  DecodedSource(BlobSource& stored, std::vector<DecodePlan> plans,
                std::function<std::string(uint32_t, uint64_t)> name_of,
                DecodedOptions options = {});
  ~DecodedSource() override;
  DecodedSource(const DecodedSource&) = delete;
  DecodedSource& operator=(const DecodedSource&) = delete;

  std::string_view kind() const override { return stored_.kind(); }
  size_t blob_count() const override { return stored_.blob_count(); }
  std::string Describe(uint32_t blob) const override { return stored_.Describe(blob); }
  const BlobInfo* Expected(uint32_t blob) const override;
  bool LiesAsStored(uint32_t blob, uint64_t offset, uint64_t length) const override {
    return AsStored(blob, offset, length);
  }
  std::string Identity(uint32_t blob) const override;
  size_t Alignment() const override { return alignment_; }
  size_t PartSize() const override { return whole_ ? whole_ : stored_.PartSize(); }
  bool LatencyTracksQueue() const override { return whole_ == 0; }
  unsigned PartsInFlight() const override {
    return whole_ ? threads_count_ + 1 : stored_.PartsInFlight();
  }
  size_t DemandSize() const override { return whole_ ? whole_ : stored_.DemandSize(); }
  void Submit(ReadKind kind, std::vector<BlobRead> reads) override;
  std::optional<DeviceShape> PageCacheShape() const override { return stored_.PageCacheShape(); }
  bool Readahead(uint32_t blob, uint64_t offset, size_t length, uint64_t first,
                 std::function<void()> landed, std::function<void()> done) override;
  Result<size_t> ReadCached(uint32_t blob, uint64_t offset, size_t length, char* buffer) override;
  nlohmann::json Stats() const override;

 private:
  struct Group;   // a decoded group, or one on its way
  struct Answer;  // a read cut in pieces, answered when the last one is
  using Ready = std::function<void(const Group&)>;

  const DecodePlan* PlanOf(uint32_t blob) const;
  // Whether [offset, offset + length) of `blob` lies as stored (not decoded) bytes.
  bool AsStored(uint32_t blob, uint64_t offset, uint64_t length) const;
  void Cut(ReadKind kind, BlobRead read, const DecodePlan& plan, std::vector<BlobRead>& passed);
  size_t PassStored(const BlobRead& read, uint64_t pos, uint64_t end, const DecodePlan& plan,
                    const std::shared_ptr<Answer>& answer, std::vector<BlobRead>& passed);
  void WithGroup(uint32_t blob, const DecodeRecipe& recipe, bool urgent, Ready ready);
  void ReadStored(uint32_t blob, const DecodeRecipe& recipe, std::shared_ptr<Group> group,
                  bool urgent);
  void Decode(uint32_t blob, const DecodeRecipe& recipe, const std::shared_ptr<Group>& group);
  // Hands `job` to the decoding threads (takes mu_).
  void Post(std::function<void()> job);
  void Finish(const std::shared_ptr<Group>& group);
  void Served(const Group& group, uint64_t within, size_t n);
  void Evict();
  void Work();

  BlobSource& stored_;
  std::vector<DecodePlan> plans_;
  std::vector<int> plan_of_;       // by blob: index into plans_, or -1
  std::vector<BlobInfo> decoded_;  // by blob: what Expected() says of a decoded one
  std::function<std::string(uint32_t, uint64_t)> name_of_;
  const DecodedOptions options_;
  // What reads must be aligned to: the stored source's, where bytes go to it as they lie;
  // none over a gzip stream, all of whose bytes are copied out of decoded groups (aligned,
  // the first block of a group would reach back into the one before, which lies at no
  // page boundary, and decode it again).
  size_t alignment_ = 1;
  // Where every group is decoded, the smallest read worth making is a whole group (any part
  // of one costs its read and its decoding): reads that size, so that the cache's reads in
  // flight are groups in flight, whose stored reads overlap the decoding of others. 0 where
  // some bytes pass as stored, which the stored source's sizes suit.
  size_t whole_ = 0;
  // Whole groups in flight: one per decoding thread and one more on its way from the
  // stored source, so that reading and decoding overlap and a reader's group is not queued
  // behind many others.
  unsigned threads_count_ = 1;

  mutable std::mutex mu_;
  std::condition_variable work_ready_;
  std::map<std::pair<uint32_t, uint64_t>, std::shared_ptr<Group>> groups_;  // by blob, offset
  std::deque<std::function<void()>> work_;  // decodes waiting for a thread
  size_t kept_ = 0;                         // bytes of decoded groups in groups_
  uint64_t clock_ = 0;                      // for least recently used
  size_t in_flight_ = 0;                    // groups whose stored bytes are on their way
  bool stopping_ = false;
  // What Stats() reports under source_stat's decode keys: the counts, and the decoding
  // time (guarded by mu_). The counts change under mu_ too, so that Stats() reads them and
  // the time as of one moment.
  source_stat::DecodeCounters counters_;
  double decode_seconds_ = 0;
  std::vector<std::thread> threads_;  // last: they stop before the rest goes
};

}  // namespace gpufs
