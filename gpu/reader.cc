// BatchReader: runs read in pieces into a ring of pinned buffers through the blob source,
// each piece copied to the device on one stream as soon as it lands, while later pieces
// are read.
//
// Every piece handed to a source is waited for before a batch returns, whatever failed in
// between: a source thread writes into the buffer until the read's `done` runs, and the
// pipeline lives on the caller's stack.
#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "gpu/batch.h"
#include "gpu/local_blobs.h"

namespace gpufs::gpu {

struct BatchReader::Buffer {
  char* data = nullptr;
  uint64_t fence = 0;  // copies out of it; wait before refilling
};

namespace {

// One piece: `size` bytes at `offset` of a run's blob.
struct Piece {
  size_t run = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

std::deque<Piece> PiecesOf(const BatchPlan& plan, size_t piece_bytes) {
  std::deque<Piece> pieces;
  for (size_t r = 0; r < plan.runs.size(); ++r) {
    const ReadRun& run = plan.runs[r];
    for (uint64_t at = 0; at < run.size; at += piece_bytes) {
      pieces.push_back(Piece{r, run.offset + at, std::min<uint64_t>(piece_bytes, run.size - at)});
    }
  }
  return pieces;
}

// A finished read: which buffer, and what the source said.
struct Landed {
  size_t buffer = 0;
  Result<size_t> got = size_t{0};
};

}  // namespace

// One ReadInto: keeps every free buffer reading, copies each piece out as it lands.
class BatchReader::Pipeline {
 public:
  Pipeline(BatchReader& reader, const BatchPlan& plan, std::vector<BlobRef> blobs, char* output);

  Status Run();

 private:
  Status SubmitMore();
  std::function<void(Result<size_t>)> LandsIn(size_t buffer);
  Landed WaitForOne();
  Status Complete(size_t buffer, const Piece& piece, Result<size_t> got);
  const BlobRef& BlobOf(const Piece& piece) const { return blobs_[plan_.runs[piece.run].blob]; }

  BatchReader& r_;
  const BatchPlan& plan_;
  const std::vector<BlobRef> blobs_;  // by BatchPlan::blobs index
  char* output_;
  std::deque<Piece> pieces_;      // not yet submitted
  std::vector<Piece> in_flight_;  // by buffer
  std::vector<size_t> free_;      // buffers neither reading nor waiting to be copied out
  size_t reading_ = 0;            // reads handed to a source and not yet landed

  std::mutex mu_;
  std::condition_variable landed_cv_;
  std::deque<Landed> landed_;  // guarded by mu_
};

BatchReader::Pipeline::Pipeline(BatchReader& reader, const BatchPlan& plan,
                                std::vector<BlobRef> blobs, char* output)
    : r_(reader),
      plan_(plan),
      blobs_(std::move(blobs)),
      output_(output),
      pieces_(PiecesOf(plan, reader.options_.buffer_bytes)),
      in_flight_(reader.buffers_.size()) {
  for (size_t b = reader.buffers_.size(); b-- > 0;) free_.push_back(b);
}

// After the first failure nothing more is submitted, but what is reading is still waited
// for, and so are the copies queued, which read the buffers and write the output; the
// first failure is what the batch returns.
Status BatchReader::Pipeline::Run() {
  Status status = Ok{};
  for (;;) {
    if (status) status = SubmitMore();
    if (reading_ == 0) break;
    Landed landed = WaitForOne();
    if (status) status = Complete(landed.buffer, in_flight_[landed.buffer], std::move(landed.got));
    free_.push_back(landed.buffer);
  }
  Status copied = r_.stager_.Synchronize(r_.stream_);
  return status ? copied : status;
}

// Fills every free buffer with the next piece and hands them to their sources together.
// Reads prepared before a failure are still submitted, so that Run waits for them.
Status BatchReader::Pipeline::SubmitMore() {
  Status status = Ok{};
  std::vector<std::pair<BlobSource*, std::vector<BlobRead>>> batches;
  while (!pieces_.empty() && !free_.empty()) {
    const size_t b = free_.back();
    Buffer& buffer = r_.buffers_[b];
    if (buffer.fence != 0) {  // the copies of its previous piece must be done
      status = r_.stager_.Wait(buffer.fence);
      if (!status) break;
      buffer.fence = 0;
    }
    free_.pop_back();
    const Piece& piece = in_flight_[b] = pieces_.front();
    pieces_.pop_front();
    const BlobRef& blob = BlobOf(piece);
    if (batches.empty() || batches.back().first != blob.source) {
      batches.push_back({blob.source, {}});
    }
    batches.back().second.push_back(
        BlobRead{blob.blob, piece.offset, piece.size, buffer.data, LandsIn(b)});
  }
  for (auto& [source, reads] : batches) {
    reading_ += reads.size();
    source->Submit(ReadKind::kStage, std::move(reads));
  }
  return status;
}

// What a read into buffer `b` runs when it ends, on a source thread (or at once, in
// Submit, when its blob cannot be opened).
std::function<void(Result<size_t>)> BatchReader::Pipeline::LandsIn(size_t b) {
  return [this, b](Result<size_t> got) {
    std::lock_guard lock(mu_);
    landed_.push_back(Landed{b, std::move(got)});
    landed_cv_.notify_one();  // under the lock: once Run sees the last one, it may return
  };
}

Landed BatchReader::Pipeline::WaitForOne() {
  std::unique_lock lock(mu_);
  landed_cv_.wait(lock, [this] { return !landed_.empty(); });
  Landed landed = std::move(landed_.front());
  landed_.pop_front();
  --reading_;
  return landed;
}

// Copies the parts of members that the piece in buffer `b` holds to their places.
Status BatchReader::Pipeline::Complete(size_t b, const Piece& piece, Result<size_t> got) {
  if (!got) return got.error();
  if (*got != piece.size) {
    const BlobRef& blob = BlobOf(piece);
    return Fail(EIO, "cannot read {} at {}: the blob ends early", blob.source->Describe(blob.blob),
                piece.offset);
  }
  Buffer& buffer = r_.buffers_[b];
  ++r_.counters_.pieces;
  r_.counters_.bytes_read += piece.size;
  for (size_t m : plan_.runs[piece.run].members) {
    const MemberLocation& member = plan_.members[m];
    const uint64_t start = std::max(member.offset, piece.offset);
    const uint64_t end = std::min(member.offset + member.size, piece.offset + piece.size);
    if (start >= end) continue;
    char* to = output_ + plan_.destination[m] + (start - member.offset);
    if (Status s = r_.stager_.CopyToDevice(to, buffer.data + (start - piece.offset), end - start,
                                           r_.stream_);
        !s) {
      return s;
    }
    ++r_.counters_.copies;
    r_.counters_.bytes_copied += end - start;
  }
  auto fence = r_.stager_.Fence(r_.stream_);
  if (!fence) return fence.error();
  buffer.fence = *fence;
  return Ok{};
}

Result<std::unique_ptr<BatchReader>> BatchReader::Create(Stager& stager, ReaderOptions options) {
  if (options.buffers == 0 || options.buffer_bytes == 0) {
    return Fail(EINVAL, "cannot make a batch reader: it needs at least one staging buffer");
  }
  std::unique_ptr<BatchReader> reader(new BatchReader(stager, options));
  auto stream = stager.CreateStream();
  if (!stream) return stream.error();
  reader->stream_ = *stream;
  for (unsigned i = 0; i < options.buffers; ++i) {
    auto data = stager.AllocatePinned(options.buffer_bytes);
    if (!data) return data.error();
    reader->buffers_.push_back(Buffer{static_cast<char*>(*data), 0});
  }
  return reader;
}

BatchReader::BatchReader(Stager& stager, ReaderOptions options)
    : stager_(stager),
      options_(std::move(options)),
      blobs_(std::make_unique<LocalBlobs>(options_.buffers)) {}

BatchReader::~BatchReader() {
  for (Buffer& b : buffers_) {
    if (b.fence != 0) (void)stager_.Wait(b.fence);  // a destructor has no one to tell
    stager_.FreePinned(b.data);
  }
  if (stream_ != 0) stager_.DestroyStream(stream_);
}

Status BatchReader::ReadDirect(const BatchPlan& plan, void* output) {
  for (size_t m = 0; m < plan.members.size(); ++m) {
    const MemberLocation& member = plan.members[m];
    auto fd = blobs_->Fd(member.blob);
    if (!fd) return fd.error();
    auto got = stager_.ReadDirect(*fd, member.offset,
                                  static_cast<char*>(output) + plan.destination[m], member.size);
    if (!got) return got.error();
    if (*got != member.size) return Fail(EIO, "cannot read {}: the blob ends early", member.path);
    ++counters_.direct_reads;
    counters_.bytes_read += member.size;
  }
  return Ok{};
}

Status BatchReader::ReadInto(const BatchPlan& plan, void* output) {
  ++counters_.batches;
  std::vector<BlobRef> blobs = blobs_->Find(plan.blobs);
  if (options_.direct_reads && stager_.has_direct_reads()) {
    Status s = ReadDirect(plan, output);
    if (s || s.error().code != ENOTSUP) return s;  // else: staged, below
  }
  return Pipeline(*this, plan, std::move(blobs), static_cast<char*>(output)).Run();
}

Result<DeviceBatch> BatchReader::Read(std::vector<MemberLocation> members) {
  BatchPlan plan = PlanBatch(std::move(members), options_.plan);
  auto output = stager_.AllocateDevice(plan.output_bytes);
  if (!output) return output.error();
  DeviceBatch batch(stager_, *output, std::move(plan));
  if (Status s = ReadInto(batch.plan(), *output); !s) return s.error();
  return batch;
}

Result<DeviceBatch> BatchReader::Read(const std::vector<std::string>& paths) {
  std::vector<MemberLocation> members;
  for (const std::string& path : paths) {
    auto member = LocateMember(path);
    if (!member) return member.error();
    members.push_back(std::move(*member));
  }
  return Read(std::move(members));
}

}  // namespace gpufs::gpu
