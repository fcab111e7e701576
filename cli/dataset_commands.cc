#include "cli/dataset_commands.h"

#include <fmt/format.h>

#include <filesystem>

#include "cli/progress_bar.h"
#include "dataset/format/checksums.h"
#include "dataset/format/mytar.h"
#include "dataset/format/native_index.h"
#include "dataset/format/range_reader.h"
#include "dataset/format/tar.h"
#include "dataset/open/open_archive.h"
#include "dataset/open/open_dataset.h"
#include "dataset/open/reindex.h"
#include "dataset/printable.h"
#include "fs/filesystem.h"
#include "fs/served_tree.h"
#include "source/blob_files.h"
#include "source/io_engine.h"
#include "source/local_source.h"

namespace gpufs {
namespace {

int Refuse(const Error& error) {
  fmt::print(stderr, "gpufsd: {}\n", PrintableLine(error.message));
  return error.code == EINTR ? 130 : 1;
}

void PrintOutside(const std::vector<std::string>& outside) {
  if (outside.empty()) return;
  fmt::print(stderr,
             "gpufsd: note: {} files outside class folders are not part of an "
             "ImageFolder dataset and were left out:\n",
             outside.size());
  for (size_t i = 0; i < outside.size() && i < 5; ++i)
    fmt::print(stderr, "  {}\n", Printable(outside[i]));
  if (outside.size() > 5) fmt::print(stderr, "  ...\n");
}

// The tree as a mount would serve it: every folder listed, every file stat'ed, through the
// filesystem core, so that what the checks on opening let through is refused here, naming
// it, rather than met by a mount. No blob byte is read.
Status CheckAsServed(const Dataset& d, const std::string& source) {
  BlobFiles blobs(d.dir, d.catalog.blobs(), d.blobs);
  PreadEngine engine(1);
  LocalSource local(blobs, engine);
  const Filesystem fs(d.catalog, local, ServeOptions{});
  return CheckServedTree(fs, source);
}

// A zip or a compressed tar is refused by the scan as not a tar; say what does work with it
// instead: its mount shows the tree a pack is made from.
Status CheckPackableArchive(const std::string& source) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(source, ec)) return Ok{};
  auto reader = OpenFileReader(source);
  if (!reader) return reader.error();
  const ArchiveKind kind = SniffArchive(**reader);
  if (kind == ArchiveKind::kZip || kind == ArchiveKind::kGzip) {
    return Fail(EINVAL,
                "cannot pack {}: a {} is packed from what its mount shows: `gpufsd mount {} "
                "MNT`, then `gpufsd pack MNT OUT` (or serve it as it is, without a pack)",
                source, kind == ArchiveKind::kZip ? "zip" : "gzip-compressed tar", source);
  }
  return Ok{};
}

}  // namespace

int RunPack(PackArgs args) {
  PackOptions& o = args.options;
  o.class_order = args.order == "class";
  o.splits = args.splits == "yes"  ? SplitMode::kSplits
             : args.splits == "no" ? SplitMode::kNoSplits
                                   : SplitMode::kAuto;
  // A count alone limits groups by count; bytes (default 16 MiB) apply otherwise.
  if (args.group_bytes) {
    o.group_bytes = *args.group_bytes;
  } else if (o.group_size) {
    o.group_bytes = 0;
  }
  if (Status s = CheckPackOutput(args.out); !s) return Refuse(s.error());
  if (Status s = CheckPackableArchive(args.source); !s) return Refuse(s.error());
  auto source = ScanSource(args.source);
  if (!source) return Refuse(source.error());
  Progress progress;
  Result<PackSummary> summary = Error{};
  double seconds = 0;
  {
    CancelOnSignal cancel(progress);
    ProgressBar bar("packing", progress);
    summary = Pack(*source, o, args.out, progress);
    seconds = bar.elapsed_s();
  }
  if (!summary) return Refuse(summary.error());
  PrintOutside(summary->outside);
  fmt::print(
      "packed {} files ({:.1f} MB) of {} classes{} into {} groups at {} in {:.1f} s "
      "({:.0f} files/s, {:.0f} MB/s)\n",
      summary->files, summary->bytes / 1e6, summary->classes,
      summary->splits ? " (with splits)" : "", summary->groups, args.out, seconds,
      summary->files / seconds, summary->bytes / 1e6 / seconds);
  return 0;
}

int RunIndex(const std::string& source, std::optional<uint32_t> group_size, unsigned threads) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(source, ec) && LooksLikeTar(source)) {
    return Refuse(Fail(EINVAL,
                       "cannot index {}: a tar needs no `gpufsd index`: its first mount lists it "
                       "and keeps the index (`gpufsd mount {} MNT`); `gpufsd index` adds "
                       "checksums to a mytar folder",
                       source, source));
  }
  Progress progress;
  Result<IndexedDataset> indexed = Error{};
  {
    CancelOnSignal cancel(progress);
    ProgressBar bar("hashing", progress);
    indexed = IndexDataset(source, group_size, threads, progress);
  }
  if (!indexed) return Refuse(indexed.error());
  fmt::print("indexed {} files in {} blobs, with SHA-256 digests: {}\n", indexed->files,
             indexed->blobs, indexed->path.string());
  return 0;
}

int RunVerify(const std::string& source, std::optional<uint32_t> group_size, unsigned threads) {
  OpenOptions options;
  options.group_size = group_size;
  options.cache_dir = DefaultCacheDir();
  auto dataset = OpenDataset(source, options);
  if (!dataset) return Refuse(dataset.error());
  if (Status s = CheckAsServed(*dataset, source); !s) return Refuse(s.error());
  if (!dataset->catalog.has_checksums()) {
    const std::string fix =
        dataset->format == "mytar" ? " (run `gpufsd index` on it first)"
        : dataset->format == "tar"
            ? ": a tar records none for its members (only for its headers); `gpufsd pack` "
              "of its mount makes a pack whose every file and blob verify checks"
            : "";
    return Refuse(Fail(EINVAL, "cannot verify {}: it has no checksums{}", source, fix));
  }
  Progress progress;
  DatasetChecksums sums;
  {
    CancelOnSignal cancel(progress);
    ProgressBar bar("verifying", progress);
    sums = ComputeChecksums(dataset->catalog, dataset->dir, threads, progress);
  }
  if (progress.cancel) return Refuse(Fail(EINTR, "interrupted"));
  std::vector<uint64_t> stored;
  for (const BlobInfo& b : dataset->blobs) stored.push_back(b.checksum);
  const auto damage = CompareChecksums(dataset->catalog, stored, sums);
  for (const Damage& d : damage) fmt::print("damaged: {}: {}\n", d.path, d.reason);
  fmt::print("{} files in {} blobs checked: {}\n", dataset->catalog.file_count(),
             dataset->catalog.blobs().size(),
             damage.empty() ? "all intact" : fmt::format("{} damaged", damage.size()));
  return damage.empty() ? 0 : 1;
}

}  // namespace gpufs
