#include "dataset/open/reindex.h"

#include "dataset/format/checksums.h"
#include "dataset/format/mytar.h"
#include "dataset/format/native_index.h"
#include "dataset/open/open_dataset.h"

namespace gpufs {
namespace {

// What `gpufsd index` rewrites: a pack's own index (its catalog and blob records kept,
// digests added) or a mytar folder's, parsed from metadata.txt.
struct IndexTarget {
  std::filesystem::path dir;
  Catalog catalog;
  IndexInfo info;  // the blob sizes and checksums are recomputed
  bool pack = false;
};

Result<IndexTarget> FindIndexTarget(const std::string& source, std::optional<uint32_t> group_size) {
  const std::filesystem::path src = std::filesystem::absolute(source).lexically_normal();
  std::error_code ec;
  if (std::filesystem::is_regular_file(src / kNativeIndexName, ec) &&
      !std::filesystem::exists(src / kMytarIndexName, ec)) {
    auto opened = OpenNativeIndex(src / kNativeIndexName);
    if (!opened) return opened.error();
    return IndexTarget{src, std::move(opened->catalog), std::move(opened->info), true};
  }
  auto dir = ResolveMytarDir(source, group_size);
  if (!dir) return dir.error();
  auto dataset = OpenMytarText(*dir);
  if (!dataset) return dataset.error();
  auto stamp = StampOf(*dir / kMytarIndexName);
  if (!stamp) return stamp.error();
  IndexInfo info;
  info.source = *stamp;
  return IndexTarget{*dir, std::move(dataset->catalog), std::move(info), false};
}

// A pack's digests are added only to bytes that still match the checksums it was packed
// with: `gpufsd index` must not bless a damaged blob as the truth.
Status CheckPackUnchanged(const IndexTarget& target, const DatasetChecksums& sums) {
  std::vector<uint64_t> stored;
  for (const BlobInfo& b : target.info.blobs) stored.push_back(b.checksum);
  if (!target.catalog.has_checksums()) return Ok{};
  const auto damage = CompareChecksums(target.catalog, stored, sums);
  if (damage.empty()) return Ok{};
  return Fail(EIO,
              "cannot index {}: {} does not match its checksum ({} damaged; see `gpufsd verify`)",
              target.dir.string(), damage.front().path, damage.size());
}

}  // namespace

Result<IndexedDataset> IndexDataset(const std::string& source, std::optional<uint32_t> group_size,
                                    unsigned threads, Progress& progress) {
  auto target = FindIndexTarget(source, group_size);
  if (!target) return target.error();
  DatasetChecksums sums = ComputeChecksums(target->catalog, target->dir, threads, progress, true);
  if (progress.cancel) return Fail(EINTR, "interrupted; no index written");
  if (!sums.unreadable.empty()) {
    return Fail(EIO, "cannot index {}: cannot read {}", target->dir.string(), sums.unreadable[0]);
  }
  if (target->pack) {
    if (Status s = CheckPackUnchanged(*target, sums); !s) return s.error();
  }
  IndexInfo& info = target->info;
  info.blobs.clear();
  for (size_t b = 0; b < sums.blobs.size(); ++b) {
    info.blobs.push_back(BlobInfo{sums.blob_sizes[b], sums.blobs[b]});
  }
  const Catalog catalog = WithFileChecksums(target->catalog, sums.files, std::move(sums.sha256));
  const auto path = target->dir / kNativeIndexName;
  if (Status s = WriteNativeIndex(catalog, info, path, FileAccess::Shared()); !s) {
    return s.error();
  }
  return IndexedDataset{path, catalog.file_count(), catalog.blobs().size()};
}

}  // namespace gpufs
