// BatchReader: runs read in pieces into a ring of pinned buffers, each piece copied to
// the device on one stream as soon as it lands, while later pieces are read.
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>

#include "gpu/batch.h"

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

}  // namespace

// One ReadInto: keeps up to `buffers` pieces reading, copies each finished one out.
class BatchReader::Pipeline {
 public:
  Pipeline(BatchReader& reader, const BatchPlan& plan, char* output)
      : r_(reader), plan_(plan), output_(output) {}

  Status Run();

 private:
  Status Submit(size_t buffer, const Piece& piece);
  Status Complete(size_t buffer, const Piece& piece, int64_t result);

  BatchReader& r_;
  const BatchPlan& plan_;
  char* output_;
  io_uring ring_{};
  bool have_ring_ = false;
};

Status BatchReader::Pipeline::Run() {
  std::deque<Piece> pieces = PiecesOf(plan_, r_.options_.buffer_bytes);
  const size_t depth = r_.buffers_.size();
  have_ring_ = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0) == 0;
  std::vector<Piece> in_flight(depth);
  std::vector<size_t> free_buffers;
  for (size_t b = 0; b < depth; ++b) free_buffers.push_back(depth - 1 - b);
  size_t reading = 0;
  Status status = Ok{};
  while (status && (!pieces.empty() || reading > 0)) {
    while (status && !pieces.empty() && !free_buffers.empty()) {
      const size_t b = free_buffers.back();
      free_buffers.pop_back();
      in_flight[b] = pieces.front();
      pieces.pop_front();
      status = Submit(b, in_flight[b]);
      if (status && have_ring_) {
        ++reading;
      } else if (status) {  // pread has filled the buffer already
        status = Complete(b, in_flight[b], -1);
        free_buffers.push_back(b);
      }
    }
    if (!have_ring_ || reading == 0 || !status) continue;
    io_uring_submit(&ring_);
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring_, &cqe) != 0) {
      status = Fail(EIO, "cannot wait for a blob read");
      break;
    }
    const size_t b = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
    const int64_t result = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    --reading;
    status = Complete(b, in_flight[b], result);
    free_buffers.push_back(b);
  }
  while (have_ring_ && reading > 0) {  // after a failure: let the kernel finish with the buffers
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring_, &cqe) != 0) break;
    io_uring_cqe_seen(&ring_, cqe);
    --reading;
  }
  if (have_ring_) io_uring_queue_exit(&ring_);
  if (!status) return status;
  return r_.stager_.Synchronize(r_.stream_);
}

Status BatchReader::Pipeline::Submit(size_t b, const Piece& piece) {
  Buffer& buffer = r_.buffers_[b];
  if (buffer.fence != 0) {  // the copies of its previous piece must be done
    if (Status s = r_.stager_.Wait(buffer.fence); !s) return s;
    buffer.fence = 0;
  }
  auto fd = r_.BlobFd(plan_.blobs[plan_.runs[piece.run].blob]);
  if (!fd) return fd.error();
  if (have_ring_) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, *fd, buffer.data, static_cast<unsigned>(piece.size), piece.offset);
    io_uring_sqe_set_data64(sqe, b);
    return Ok{};
  }
  const ssize_t n = pread(*fd, buffer.data, piece.size, static_cast<off_t>(piece.offset));
  if (n != static_cast<ssize_t>(piece.size)) {
    return Fail(EIO, "cannot read {} at {}: {}", plan_.blobs[plan_.runs[piece.run].blob],
                piece.offset, n < 0 ? strerror(errno) : "the blob ends early");
  }
  return Ok{};
}

// Copies the parts of members that the piece in buffer `b` holds to their places.
Status BatchReader::Pipeline::Complete(size_t b, const Piece& piece, int64_t result) {
  const std::string& blob = plan_.blobs[plan_.runs[piece.run].blob];
  if (have_ring_ && result != static_cast<int64_t>(piece.size)) {
    return Fail(EIO, "cannot read {} at {}: {}", blob, piece.offset,
                result < 0 ? strerror(static_cast<int>(-result)) : "the blob ends early");
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
    : stager_(stager), options_(std::move(options)) {}

BatchReader::~BatchReader() {
  for (Buffer& b : buffers_) {
    if (b.fence != 0) (void)stager_.Wait(b.fence);  // a destructor has no one to tell
    stager_.FreePinned(b.data);
  }
  if (stream_ != 0) stager_.DestroyStream(stream_);
  for (const auto& [path, fd] : fds_) close(fd);
}

Result<int> BatchReader::BlobFd(const std::string& path) {
  if (auto it = fds_.find(path); it != fds_.end()) return it->second;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Fail(errno, "cannot open {}: {}", path, strerror(errno));
  fds_[path] = fd;
  return fd;
}

Status BatchReader::ReadDirect(const BatchPlan& plan, void* output) {
  for (size_t m = 0; m < plan.members.size(); ++m) {
    const MemberLocation& member = plan.members[m];
    auto fd = BlobFd(member.blob);
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
  if (options_.direct_reads && stager_.has_direct_reads()) {
    Status s = ReadDirect(plan, output);
    if (s || s.error().code != ENOTSUP) return s;  // else: staged, below
  }
  return Pipeline(*this, plan, static_cast<char*>(output)).Run();
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
