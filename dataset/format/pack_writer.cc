#include "dataset/format/pack_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "base/file_io.h"
#include "dataset/catalog.h"
#include "dataset/catalog_builder.h"
#include "dataset/format/checksums.h"
#include "dataset/format/native_index.h"

namespace gpufs {
namespace {

constexpr size_t kChunk = 4u << 20;  // bytes streamed per read; bounds a worker's memory

std::string BlobName(size_t group) { return fmt::format("blob-{:06}.gpufs", group); }

uint64_t AlignUp(uint64_t n, uint32_t align) {
  return align == 0 ? n : (n + align - 1) / align * align;
}

// Fisher-Yates over mt19937_64, both fully specified, so a seed means the same order on
// every platform and library version (std::shuffle's algorithm is unspecified).
std::vector<size_t> MemberOrder(const TreeShape& shape, const PackOptions& options) {
  std::vector<size_t> order(shape.files.size());
  std::iota(order.begin(), order.end(), 0);
  if (options.class_order) {
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return shape.files[a].tree_path < shape.files[b].tree_path;
    });
    return order;
  }
  std::mt19937_64 rng(options.seed);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  return order;
}

struct PlannedGroup {
  size_t begin = 0;  // positions in the member order
  size_t end = 0;
  uint64_t size = 0;
};

// Everything decided before a byte is written: order, groups and offsets.
struct Plan {
  std::vector<size_t> order;         // position -> index into shape.files
  std::vector<uint64_t> offsets;     // position -> offset in its blob
  std::vector<uint64_t> checksums;   // position -> XXH3-64, filled by the writers
  std::vector<Sha256Digest> sha256;  // position -> SHA-256, likewise
  std::vector<PlannedGroup> groups;
  std::vector<BlobInfo> blobs;  // group -> size and checksum, filled by the writers
};

Plan MakePlan(const TreeShape& shape, const PackSource& source, const PackOptions& options) {
  Plan plan;
  plan.order = MemberOrder(shape, options);
  plan.offsets.resize(plan.order.size());
  plan.checksums.resize(plan.order.size());
  plan.sha256.resize(plan.order.size());
  PlannedGroup group;
  for (size_t pos = 0; pos < plan.order.size(); ++pos) {
    const uint64_t size = source.entries[shape.files[plan.order[pos]].input].size;
    const uint64_t offset = AlignUp(group.size, options.align);
    const bool full_count = options.group_size && pos - group.begin >= options.group_size;
    const bool full_bytes = options.group_bytes && offset + size > options.group_bytes;
    if (pos > group.begin && (full_count || full_bytes)) {
      plan.groups.push_back(group);
      group = PlannedGroup{pos, pos, 0};
    }
    plan.offsets[pos] = AlignUp(group.size, options.align);
    group.size = plan.offsets[pos] + size;
    group.end = pos + 1;
  }
  if (group.end > group.begin) plan.groups.push_back(group);
  plan.blobs.resize(plan.groups.size());
  return plan;
}

// Streams one group into its blob file, checksumming members and the whole blob.
class BlobWriter {
 public:
  BlobWriter(const PackSource& source, const TreeShape& shape, Plan& plan,
             const std::filesystem::path& folder, Progress& progress)
      : source_(source),
        shape_(shape),
        plan_(plan),
        folder_(folder),
        progress_(progress),
        buffer_(new char[kChunk]) {}
  ~BlobWriter() {
    if (source_fd_ >= 0) close(source_fd_);
  }

  Status Write(size_t group_id) {
    const PlannedGroup& group = plan_.groups[group_id];
    const std::filesystem::path path = folder_ / BlobName(group_id);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd < 0) return Fail(errno, "cannot create {}: {}", path.string(), strerror(errno));
    ChecksumStream blob_hash;
    Status s = Ok{};
    uint64_t written = 0;
    for (size_t pos = group.begin; s && pos < group.end; ++pos) {
      if (progress_.cancel.load()) s = Fail(EINTR, "interrupted");
      if (s) s = Pad(fd, path, plan_.offsets[pos] - written, blob_hash);
      if (s) s = CopyMember(fd, path, pos, blob_hash);
      written = plan_.offsets[pos] + source_.entries[shape_.files[plan_.order[pos]].input].size;
    }
    plan_.blobs[group_id] = BlobInfo{written, blob_hash.Digest()};
    if (s && fdatasync(fd) != 0)
      s = Fail(errno, "cannot sync {}: {}", path.string(), strerror(errno));
    close(fd);
    return s;
  }

 private:
  Status Pad(int fd, const std::filesystem::path& path, uint64_t bytes, ChecksumStream& hash) {
    if (bytes == 0) return Ok{};
    const std::string zeros(bytes, '\0');
    hash.Update(zeros.data(), zeros.size());
    return WriteAll(fd, zeros, path);
  }

  Status CopyMember(int fd, const std::filesystem::path& path, size_t pos, ChecksumStream& blob) {
    const SourceEntry& entry = source_.entries[shape_.files[plan_.order[pos]].input];
    auto in = SourceFd(entry.file);
    if (!in) return in.error();
    ChecksumStream member;
    Sha256Stream digest;
    Status s = Ok{};
    for (uint64_t done = 0; s && done < entry.size;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kChunk, entry.size - done));
      const ssize_t n = pread(*in, buffer_.get(), want, static_cast<off_t>(entry.offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        s = n < 0 ? Fail(errno, "cannot read {}: {}", SourceName(entry), strerror(errno))
                  : Fail(EIO, "cannot read {}: it shrank while being packed", SourceName(entry));
        break;
      }
      member.Update(buffer_.get(), static_cast<size_t>(n));
      digest.Update(buffer_.get(), static_cast<size_t>(n));
      blob.Update(buffer_.get(), static_cast<size_t>(n));
      s = WriteAll(fd, std::string_view(buffer_.get(), static_cast<size_t>(n)), path);
      done += static_cast<uint64_t>(n);
    }
    plan_.checksums[pos] = member.Digest();
    plan_.sha256[pos] = digest.Digest();
    progress_.files.fetch_add(1);
    progress_.bytes.fetch_add(entry.size);
    return s;
  }

  std::string SourceName(const SourceEntry& entry) const {
    const std::string& file = source_.files[entry.file];
    return source_.files.size() == 1 && file != entry.path ? file + ":" + entry.path : file;
  }

  // Keeps the last source open: a tar is one file read by every member.
  Result<int> SourceFd(uint32_t file) {
    if (source_fd_ >= 0 && source_file_ == file) return source_fd_;
    if (source_fd_ >= 0) close(source_fd_);
    source_fd_ = open(source_.files[file].c_str(), O_RDONLY | O_CLOEXEC);
    source_file_ = file;
    if (source_fd_ < 0) {
      return Fail(errno, "cannot read {}: {}", source_.files[file], strerror(errno));
    }
    return source_fd_;
  }

  const PackSource& source_;
  const TreeShape& shape_;
  Plan& plan_;
  const std::filesystem::path& folder_;
  Progress& progress_;
  std::unique_ptr<char[]> buffer_;
  int source_fd_ = -1;
  uint32_t source_file_ = 0;
};

// Runs BlobWriters on `threads` threads; the first failure stops the others.
Status WriteBlobs(const PackSource& source, const TreeShape& shape, Plan& plan,
                  const std::filesystem::path& folder, unsigned threads, Progress& progress) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first = Ok{};  // guarded by mu
  auto work = [&] {
    BlobWriter writer(source, shape, plan, folder, progress);
    for (size_t g = next++; g < plan.groups.size(); g = next++) {
      Status s = writer.Write(g);
      if (s) continue;
      std::lock_guard lock(mu);
      if (first) first = s;
      progress.cancel = true;
      return;
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < std::max(1u, threads); ++i) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  return first;
}

DatasetSpec SpecOf(const TreeShape& shape, const PackSource& source, const Plan& plan) {
  DatasetSpec spec;
  spec.index_file = source.label;
  spec.classes = shape.classes;
  spec.folders = shape.folders;
  spec.has_checksums = true;
  spec.has_sha256 = true;
  for (size_t g = 0; g < plan.groups.size(); ++g) {
    spec.groups.push_back(GroupSpec{BlobName(g), 0, plan.blobs[g].size, 0});
    for (size_t pos = plan.groups[g].begin; pos < plan.groups[g].end; ++pos) {
      const ShapedFile& file = shape.files[plan.order[pos]];
      spec.members.push_back(MemberSpec{file.tree_path, file.class_id, static_cast<uint32_t>(g),
                                        plan.offsets[pos], source.entries[file.input].size,
                                        plan.checksums[pos], static_cast<uint32_t>(pos + 1),
                                        plan.sha256[pos]});
    }
  }
  return spec;
}

// A fresh hidden folder beside OUT, refusing an OUT that holds anything.
Result<std::filesystem::path> PrepareOutput(const std::filesystem::path& out) {
  namespace stdfs = std::filesystem;
  std::error_code ec;
  if (Status s = CheckPackOutput(out); !s) return s.error();
  const stdfs::path parent = stdfs::absolute(out).parent_path();
  const stdfs::path temp =
      parent / fmt::format(".{}.partial-{}", out.filename().string(), getpid());
  stdfs::remove_all(temp, ec);
  if (mkdir(temp.c_str(), 0755) != 0) {
    return Fail(errno, "cannot create {}: {}", temp.string(), strerror(errno));
  }
  return temp;
}

Status Publish(const std::filesystem::path& temp, const std::filesystem::path& out) {
  if (Status s = SyncFolder(temp); !s) return s;
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && rmdir(out.c_str()) != 0) {
    return Fail(errno, "cannot replace {}: {}", out.string(), strerror(errno));
  }
  if (rename(temp.c_str(), out.c_str()) != 0) {
    return Fail(errno, "cannot rename {} to {}: {}", temp.string(), out.string(), strerror(errno));
  }
  return SyncFolder(std::filesystem::absolute(out).parent_path());
}

Status CheckOptions(const PackOptions& options) {
  if (options.align != 0 && (options.align & (options.align - 1)) != 0) {
    return Fail(EINVAL, "cannot pack: --align {} is not a power of two", options.align);
  }
  if (options.group_size == 0 && options.group_bytes == 0) {
    return Fail(EINVAL, "cannot pack: give --group-size or --group-bytes");
  }
  return Ok{};
}

}  // namespace

Status CheckPackOutput(const std::filesystem::path& out) {
  namespace stdfs = std::filesystem;
  std::error_code ec;
  if (stdfs::exists(out, ec) && (!stdfs::is_directory(out, ec) || !stdfs::is_empty(out, ec))) {
    return Fail(EEXIST, "cannot pack into {}: it exists and is not an empty folder", out.string());
  }
  const stdfs::path parent = stdfs::absolute(out).parent_path();
  if (!stdfs::is_directory(parent, ec)) {
    return Fail(ENOENT, "cannot pack into {}: folder {} does not exist", out.string(),
                parent.string());
  }
  return Ok{};
}

Result<PackSummary> Pack(const PackSource& source, const PackOptions& options,
                         const std::filesystem::path& out, Progress& progress) {
  if (Status s = CheckOptions(options); !s) return s.error();
  std::vector<std::string> paths;
  paths.reserve(source.entries.size());
  for (const SourceEntry& e : source.entries) paths.push_back(e.path);
  auto shape = ShapeTree(paths, options.splits, source.strip_wrappers, source.label);
  if (!shape) return shape.error();
  paths = {};
  Plan plan = MakePlan(*shape, source, options);
  for (size_t pos = 0; pos < plan.order.size(); ++pos) {
    progress.total_bytes += source.entries[shape->files[plan.order[pos]].input].size;
  }
  progress.total_files = plan.order.size();
  auto temp = PrepareOutput(out);
  if (!temp) return temp.error();
  Status s = WriteBlobs(source, *shape, plan, *temp, options.threads, progress);
  if (s) {
    auto catalog = CatalogFromSpec(SpecOf(*shape, source, plan));
    IndexInfo info;
    info.alignment = options.align;
    info.blobs = plan.blobs;
    s = catalog ? WriteNativeIndex(*catalog, info, *temp / kNativeIndexName, FileAccess::Shared())
                : Status(catalog.error());
  }
  if (s) s = Publish(*temp, out);
  if (!s) {
    std::error_code ec;
    std::filesystem::remove_all(*temp, ec);
    return s.error();
  }
  PackSummary summary;
  summary.files = plan.order.size();
  summary.bytes = progress.total_bytes;
  summary.groups = plan.groups.size();
  summary.classes = shape->classes.size();
  summary.splits = shape->splits;
  summary.outside = std::move(shape->outside);
  return summary;
}

}  // namespace gpufs
