// The client library: a batch of paths under a gpufs mount in, their bytes in device
// memory out, without passing through FUSE.
//
// The mount tells where each file lives (user.gpufs.{blob,offset,size}); the batch is
// grouped by blob and sorted by offset, and members close together in a blob are read as
// one run, since a group's members are adjacent. Runs are read in pieces into a ring of
// pinned staging buffers through a blob source (the daemon's seam: io_uring, else pread
// threads), and each piece is copied to the device on a stream as soon as it lands while
// the next pieces are read: I/O and transfer overlap, and a buffer is refilled only once
// its copies are done. Where the driver has GPUDirect Storage (cuFile), members are
// read straight into device memory instead. Bytes equal a plain read of each file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "gpu/staging.h"

namespace gpufs::gpu {

class LocalBlobs;

// Where one file's bytes lie.
struct MemberLocation {
  std::string path;
  std::string blob;
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Asks the mount, by extended attributes, where `path` lives; names a file off any gpufs
// mount as such.
Result<MemberLocation> LocateMember(const std::string& path);

// A byte range of one blob read together, covering whole members.
struct ReadRun {
  size_t blob = 0;  // index into BatchPlan::blobs
  uint64_t offset = 0;
  uint64_t size = 0;
  std::vector<size_t> members;  // indexes into BatchPlan::members, by offset
};

struct BatchPlan {
  std::vector<MemberLocation> members;  // in the batch's order
  std::vector<uint64_t> destination;    // each member's offset in the output
  uint64_t output_bytes = 0;
  std::vector<std::string> blobs;
  std::vector<ReadRun> runs;  // by blob, then by offset
  uint64_t read_bytes = 0;    // what the runs read, gaps included
};

struct PlanOptions {
  uint64_t max_gap = 64 << 10;  // bytes between members still read through, not skipped
  uint64_t max_run = 16 << 20;  // longest run
  uint64_t align = 256;         // of each member in the output (decoders like aligned input)
};

BatchPlan PlanBatch(std::vector<MemberLocation> members, const PlanOptions& options = {});

struct ReaderOptions {
  size_t buffer_bytes = 8 << 20;  // each staging buffer; a run is read in pieces this large
  unsigned buffers = 4;           // pieces in flight (reading or copying)
  bool direct_reads = true;       // use cuFile where the driver has it
  PlanOptions plan;
};

struct ReaderCounters {
  uint64_t batches = 0;
  uint64_t pieces = 0;        // staged reads
  uint64_t direct_reads = 0;  // cuFile reads
  uint64_t copies = 0;        // host-to-device copies
  uint64_t bytes_read = 0;
  uint64_t bytes_copied = 0;
};

// Device memory holding a batch; each file a span of it. Freed with the batch.
class DeviceBatch {
 public:
  DeviceBatch(Stager& stager, void* data, BatchPlan plan);
  DeviceBatch(DeviceBatch&& other) noexcept;
  DeviceBatch& operator=(DeviceBatch&&) = delete;
  ~DeviceBatch();
  size_t count() const { return plan_.members.size(); }
  void* data(size_t i) const { return static_cast<char*>(data_) + plan_.destination[i]; }
  uint64_t size(size_t i) const { return plan_.members[i].size; }
  const BatchPlan& plan() const { return plan_; }

 private:
  Stager* stager_;
  void* data_;
  BatchPlan plan_;
};

class BatchReader {
 public:
  // `stager` must outlive the reader. Not thread-safe: one batch at a time per reader.
  static Result<std::unique_ptr<BatchReader>> Create(Stager& stager, ReaderOptions options = {});
  ~BatchReader();

  // Locates, plans, allocates and reads.
  Result<DeviceBatch> Read(const std::vector<std::string>& paths);
  // The same from locations known already (the extent API; no mount needed).
  Result<DeviceBatch> Read(std::vector<MemberLocation> members);
  // Reads a plan into `output` (device memory of plan.output_bytes, or host memory for a
  // host stager).
  Status ReadInto(const BatchPlan& plan, void* output);

  const ReaderCounters& counters() const { return counters_; }
  Stager& stager() { return stager_; }

 private:
  struct Buffer;
  class Pipeline;
  BatchReader(Stager& stager, ReaderOptions options);
  Status ReadDirect(const BatchPlan& plan, void* output);

  Stager& stager_;
  const ReaderOptions options_;
  std::vector<Buffer> buffers_;
  StreamId stream_ = 0;
  std::unique_ptr<LocalBlobs> blobs_;  // the blobs batches have named, kept open
  ReaderCounters counters_;
};

}  // namespace gpufs::gpu
