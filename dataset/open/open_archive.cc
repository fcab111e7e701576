#include "dataset/open/open_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "base/file_io.h"
#include "base/private_files.h"
#include "dataset/compressed/gzip.h"
#include "dataset/compressed/plan_file.h"
#include "dataset/compressed/zip.h"
#include "dataset/format/tar.h"
#include "dataset/format/tar_header.h"
#include "dataset/open/tar_dataset.h"

namespace gpufs {
namespace {

// Decoded groups of a zip lie past its stored bytes, each on a page of its own, so that
// aligned reads of one never reach into another.
constexpr uint64_t kDecodedAlign = 4096;
// A group is decoded whole: a member larger than this is not served from a zip.
constexpr uint64_t kLargestDecoded = uint64_t{1} << 30;

uint64_t AlignUp(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

bool StartsWith(const char* bytes, size_t n, std::string_view magic) {
  return n >= magic.size() && std::memcmp(bytes, magic.data(), magic.size()) == 0;
}

// The zip members from `i` that make one group, and its recipe: members stored alike from
// the first's data to the last's end, as they lie; otherwise members (a deflated one
// first) laid back to back at `cursor` in decoded space, up to `group_bytes` decoded.
Result<size_t> ZipRun(ZipListing& z, size_t i, uint64_t group_bytes, uint64_t& cursor,
                      DecodePlan& plan, const std::string& label) {
  std::vector<TarEntry>& entries = z.files.entries;
  const std::vector<ZipPart>& parts = z.parts;
  size_t j = i + 1;
  DecodeRecipe r;
  if (parts[i].method == 0) {
    const uint64_t start = entries[i].offset;
    while (j < entries.size() && parts[j].method == 0 &&
           entries[j].offset + entries[j].size - start <= group_bytes) {
      ++j;
    }
    r = DecodeRecipe{.offset = start,
                     .size = entries[j - 1].offset + entries[j - 1].size - start,
                     .stored_offset = start,
                     .stored_size = entries[j - 1].offset + entries[j - 1].size - start,
                     .kind = DecodeKind::kAsStored};
  } else {
    uint64_t bytes = entries[i].size;
    while (j < entries.size() && bytes + entries[j].size <= group_bytes) bytes += entries[j++].size;
    if (bytes > kLargestDecoded) {
      return Fail(EFBIG,
                  "cannot serve {}: its member {} inflates to {} bytes, and members are "
                  "inflated whole, up to {}",
                  label, std::string(entries[i].path), bytes, kLargestDecoded);
    }
    const ZipPart& last = parts[j - 1];
    r = DecodeRecipe{.offset = cursor,
                     .size = bytes,
                     .stored_offset = parts[i].data_offset,
                     .stored_size = last.data_offset + last.stored_size - parts[i].data_offset,
                     .kind = DecodeKind::kZip,
                     .first = static_cast<uint32_t>(plan.parts.size()),
                     .count = static_cast<uint32_t>(j - i)};
    for (size_t k = i; k < j; ++k) {
      plan.parts.push_back(parts[k]);
      entries[k].offset = cursor;
      cursor += entries[k].size;
    }
    cursor = AlignUp(cursor, kDecodedAlign);
  }
  if (r.size > 0) plan.recipes.push_back(r);
  return j;
}

// A zip as a dataset: its listing with each deflated member moved to its place in decoded
// space, grouped as the plan's recipes are.
Result<Dataset> ZipDataset(RangeReader& reader, const std::filesystem::path& name,
                           const SourceStamp& stamp, const OpenOptions& options,
                           const ReaderFactory& more, unsigned parallel) {
  auto listing = ListZip(reader, options.progress, more, parallel);
  if (!listing) return listing.error();
  DecodePlan plan{.blob = 0, .kind = DecodeKind::kZip, .stored_size = stamp.size};
  uint64_t cursor = AlignUp(stamp.size, kDecodedAlign);
  for (size_t i = 0; i < listing->files.entries.size();) {
    auto next = ZipRun(*listing, i, options.tar_group_bytes, cursor, plan, reader.label());
    if (!next) return next.error();
    i = *next;
  }
  plan.decoded_size = cursor;
  std::sort(plan.recipes.begin(), plan.recipes.end(),
            [](const DecodeRecipe& a, const DecodeRecipe& b) { return a.offset < b.offset; });
  std::vector<uint64_t> cuts;
  for (const DecodeRecipe& r : plan.recipes) cuts.push_back(r.offset);
  auto d = TarDataset(name, listing->files, stamp, options.tar_group_bytes, &cuts);
  if (!d) return d.error();
  d->format = "zip";
  d->plans.push_back(std::move(plan));
  return d;
}

// Shows a .tar.gz's first listing as the archive's bytes inflated so far (the walk's own
// count is of decoded bytes, whose total is not known until the end).
class GzipProgress {
 public:
  GzipProgress(Progress* shown, const GzipReader& gz, uint64_t total) : shown_(shown), gz_(gz) {
    if (!shown_) return;
    shown_->total_bytes = total;
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Copy();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  ~GzipProgress() {
    if (!thread_.joinable()) return;
    stop_ = true;
    thread_.join();
    Copy();
  }
  Progress* walk() { return &walk_; }

 private:
  void Copy() {
    shown_->files = walk_.files.load();
    shown_->bytes = gz_.compressed_read();
  }

  Progress* const shown_;
  const GzipReader& gz_;
  Progress walk_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The recipes of a .tar.gz's groups: each starts at the last access point at or before
// it and reads the archive up to where its last byte has been inflated. Only the points
// (and windows) some group starts from are kept.
DecodePlan GzipPlan(const Catalog& catalog, GzipReader& gz, uint64_t archive_size) {
  DecodePlan plan{.blob = 0,
                  .kind = DecodeKind::kGzip,
                  .stored_size = archive_size,
                  .decoded_size = gz.decoded_size()};
  const std::vector<GzipPoint>& points = gz.points();
  const std::vector<char> windows = gz.TakeWindows();
  std::vector<uint32_t> kept(points.size(), UINT32_MAX);
  for (uint32_t g = 0; g < catalog.group_count(); ++g) {
    const GroupExtent& extent = catalog.Group(g);
    if (extent.size == 0) continue;
    auto after = std::upper_bound(points.begin(), points.end(), extent.offset,
                                  [](uint64_t o, const GzipPoint& p) { return o < p.out; });
    const size_t p = static_cast<size_t>(after - points.begin()) - 1;  // the first is at 0
    if (kept[p] == UINT32_MAX) {
      GzipPoint point = points[p];
      if (point.window != kNoWindow) {
        const char* w = windows.data() + size_t{point.window} * kGzipWindow;
        point.window = static_cast<uint32_t>(plan.windows.size() / kGzipWindow);
        plan.windows.insert(plan.windows.end(), w, w + kGzipWindow);
      }
      kept[p] = static_cast<uint32_t>(plan.points.size());
      plan.points.push_back(point);
    }
    const GzipPoint& point = points[p];
    const uint64_t stored = point.in - (point.bits ? 1 : 0);
    plan.recipes.push_back(DecodeRecipe{
        .offset = extent.offset,
        .size = extent.size,
        .stored_offset = stored,
        .stored_size = std::min(gz.StoredEnd(extent.offset + extent.size), archive_size) - stored,
        .kind = DecodeKind::kGzip,
        .first = kept[p]});
  }
  return plan;
}

// A .tar.gz as a dataset: inflated once, front to back, while the tar walk lists it.
Result<Dataset> GzipDataset(RangeReader& reader, const std::filesystem::path& name,
                            const SourceStamp& stamp, const OpenOptions& options) {
  GzipReader gz(reader, options.tar_group_bytes);
  std::optional<Result<TarListing>> listing;
  {
    GzipProgress progress(options.progress, gz, stamp.size);
    listing.emplace(ListTar(gz, {}, 1, kLocalTarChunk, progress.walk()));
    if (*listing) {
      if (Status s = gz.Finish(); !s) return s.error();
    }
  }
  if (!*listing) return listing->error();
  std::vector<uint64_t> cuts;
  for (const GzipPoint& p : gz.points()) cuts.push_back(p.out);
  auto d = TarDataset(name, **listing, stamp, options.tar_group_bytes, &cuts);
  if (!d) return d.error();
  d->format = "tar.gz";
  d->plans.push_back(GzipPlan(d->catalog, gz, stamp.size));
  return d;
}

// The whole of the file open at `fd`, which `path` names in errors; closes it.
Result<std::string> ReadAllOf(UniqueFd fd, const std::filesystem::path& path) {
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = read(fd.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Fail(errno, "cannot read {}: {}", path.string(), strerror(errno));
    if (n == 0) return bytes;
    bytes.append(buffer, static_cast<size_t>(n));
  }
}

// The plan file beside the index `place` names, opened as that index is.
Result<std::string> ReadPlanBytes(const IndexPlace& place) {
  const std::filesystem::path path = PlanPathOf(place.path);
  if (place.beside) {
    auto fd = OpenTrustedIndex(path, place.data_owner);
    if (!fd) return Fail(fd.error().code, "cannot open {}: {}", path.string(), fd.error().message);
    return ReadAllOf(std::move(*fd), path);
  }
  auto folder = OpenPrivateFolder(path.parent_path(), kIndexCacheRole);
  if (!folder) return folder.error();
  const int fd = openat(folder->fd.get(), path.filename().c_str(),
                        O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return Fail(errno, "cannot open {}: {}", path.string(), strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return Fail(EINVAL, "cannot open {}: not a regular file", path.string());
  }
  return ReadAllOf(UniqueFd(fd), path);
}

}  // namespace

ArchiveKind SniffArchive(RangeReader& reader) {
  // One read of the first block, whose start names a compressed stream or a zip and whose
  // whole is a tar's header: a remote archive pays a round trip a read.
  char head[kTarBlock] = {};
  auto n = reader.ReadAt(0, sizeof(head), head);
  const size_t got = n ? *n : 0;
  if (StartsWith(head, got, "\x1f\x8b")) return ArchiveKind::kGzip;
  if (StartsWith(head, got, "PK\x03\x04") || StartsWith(head, got, "PK\x05\x06")) {
    return ArchiveKind::kZip;
  }
  if (StartsWith(head, got, "\x28\xb5\x2f\xfd")) return ArchiveKind::kZstd;
  if (StartsWith(head, got,
                 "\xfd"
                 "7zXZ"))
    return ArchiveKind::kXz;
  if (StartsWith(head, got, "BZh")) return ArchiveKind::kBzip2;
  if (StartsWith(head, got, "7z\xbc\xaf\x27\x1c")) return ArchiveKind::k7z;
  if (LooksLikeTarBlock(head, got)) return ArchiveKind::kTar;
  return ArchiveKind::kUnknown;
}

bool HasArchiveSuffix(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(std::begin(kArchiveSuffixes), std::end(kArchiveSuffixes),
                     [&](std::string_view suffix) { return lower.ends_with(suffix); });
}

Error NotServed(const std::string& label, ArchiveKind kind) {
  std::string what = "not a folder, a tar, a zip nor a gzip-compressed tar";
  if (kind == ArchiveKind::kZstd) what = "a zstd stream";
  if (kind == ArchiveKind::kXz) what = "an xz stream";
  if (kind == ArchiveKind::kBzip2) what = "a bzip2 stream";
  if (kind == ArchiveKind::k7z) what = "a 7-Zip archive";
  if (kind == ArchiveKind::kUnknown) return Fail(EINVAL, "cannot open dataset {}: {}", label, what);
  return Fail(EINVAL,
              "cannot open dataset {}: {}, which cannot be read at random; recompress it with "
              "gzip, pigz or bgzip (a .tar.gz is served in place), make it a zip, or unpack it "
              "once",
              label, what);
}

Result<Dataset> ListArchive(RangeReader& reader, ArchiveKind kind,
                            const std::filesystem::path& name, const SourceStamp& stamp,
                            const OpenOptions& options, const ReaderFactory& more,
                            unsigned parallel, size_t chunk) {
  if (kind == ArchiveKind::kZip) return ZipDataset(reader, name, stamp, options, more, parallel);
  if (kind == ArchiveKind::kGzip) return GzipDataset(reader, name, stamp, options);
  if (kind != ArchiveKind::kTar) return NotServed(reader.label(), kind);
  auto listing = ListTar(reader, more, parallel, chunk, options.progress);
  if (!listing) return listing.error();
  return TarDataset(name, *listing, stamp, options.tar_group_bytes);
}

std::filesystem::path PlanPathOf(const std::filesystem::path& index) {
  return std::filesystem::path(index).concat(kPlanFileSuffix);
}

uint64_t PlanBinding(const Catalog& catalog) {
  const std::span<const GroupExtent> groups = catalog.tables().groups;
  return XXH3_64bits(groups.data(), groups.size_bytes());
}

Status SavePlans(const std::vector<DecodePlan>& plans, const Catalog& catalog,
                 const IndexPlace& place, const SourceStamp& stamp) {
  const FileAccess access = place.beside ? FileAccess::Shared(place.mode) : FileAccess::Private();
  return WriteFileAtomically(PlanPathOf(place.path),
                             PlanFileBytes(plans, PlanBinding(catalog), stamp), access);
}

Result<std::vector<DecodePlan>> LoadPlans(const Catalog& catalog, const IndexPlace& place,
                                          const SourceStamp& stamp) {
  auto bytes = ReadPlanBytes(place);
  if (!bytes) return bytes.error();
  return ReadPlanFile(*bytes, PlanPathOf(place.path).string(), PlanBinding(catalog), stamp,
                      {stamp.size});
}

}  // namespace gpufs
