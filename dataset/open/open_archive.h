// Archives served in place: what kind a file is by its first bytes, and the listing of a
// tar, a zip or a gzip-compressed tar as a dataset, the compressed ones with their decode
// plans (decode_plan.h), which are kept beside the archive's index.
//
//   ARCHIVE.tar          members served as they lie
//   ARCHIVE.zip          stored members as they lie; runs of deflated ones inflated whole
//   ARCHIVE.tar.gz       inflated once to list it; groups start where inflating may start
//                        again (access points), each inflated whole when it loads
//
// zstd, xz and bzip2 streams are refused, naming what works instead.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "dataset/catalog.h"
#include "dataset/compressed/decode_plan.h"
#include "dataset/format/native_index.h"
#include "dataset/format/range_reader.h"
#include "dataset/format/tar.h"
#include "dataset/open/dataset.h"

namespace gpufs {

enum class ArchiveKind { kUnknown, kTar, kZip, kGzip, kZstd, kXz, kBzip2, k7z };

// The names an archive goes by: a URL ending in one names an object to open as an archive
// (served, or refused saying what works), where any other name is a folder.
inline constexpr std::string_view kArchiveSuffixes[] = {".tar",     ".zip",  ".tar.gz", ".tgz",
                                                        ".tar.zst", ".tzst", ".tar.xz", ".txz",
                                                        ".tar.bz2", ".tbz2", ".7z"};

// Whether `name` ends as an archive's name does (kArchiveSuffixes, in any case).
bool HasArchiveSuffix(std::string_view name);

// What `reader` holds, from its first bytes.
ArchiveKind SniffArchive(RangeReader& reader);

// Why `label` cannot be served, being of `kind` (not kTar, kZip nor kGzip), and what works.
Error NotServed(const std::string& label, ArchiveKind kind);

// Lists the archive `reader` holds, of `kind`, as a dataset whose one blob is `name`,
// with the listing's notes. `more`, `parallel` and `chunk` are as ListTar takes them; a
// compressed archive is read front to back once, whatever they say.
Result<Dataset> ListArchive(RangeReader& reader, ArchiveKind kind,
                            const std::filesystem::path& name, const SourceStamp& stamp,
                            const OpenOptions& options, const ReaderFactory& more,
                            unsigned parallel, size_t chunk);

// The file beside an index that holds its decode plans.
std::filesystem::path PlanPathOf(const std::filesystem::path& index);

// What binds plans to the index they were made with: a checksum of its group table.
uint64_t PlanBinding(const Catalog& catalog);

// Writes `plans` for `catalog` beside the index `place` names, with the index's access,
// bound to the archive as `stamp` describes it.
Status SavePlans(const std::vector<DecodePlan>& plans, const Catalog& catalog,
                 const IndexPlace& place, const SourceStamp& stamp);

// The plans beside the index `place` names, read as that index was (trusted beside the
// data, private in the cache), checked against `catalog` and the archive as `stamp`
// describes it now.
Result<std::vector<DecodePlan>> LoadPlans(const Catalog& catalog, const IndexPlace& place,
                                          const SourceStamp& stamp);

}  // namespace gpufs
