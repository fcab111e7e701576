// A reader of uncompressed tar archives (POSIX ustar, pax, GNU and v7), enough to serve an
// archive's files in place: it walks the headers and records where each regular file's
// bytes lie, without copying them. It reads an archive as GNU tar extracts it
// (tar_header.h says how each header is read).
//
// Long names and link targets (GNU 'L' and 'K' records, pax "path" and "linkpath") and pax
// sizes are followed; hard links become a second name for the target's bytes. The last
// member of a path decides what the path is, as extraction would: a file later replaced by
// a symbolic link, a fifo or a folder is gone. Folders are implied by paths. Symbolic
// links, devices and fifos (and hard links to them) have no bytes to serve and are skipped
// (and counted). Sparse files (GNU 'S', pax GNU.sparse 0.0, 0.1 and 1.0) and multi-volume
// continuations are refused, naming the member, since their bytes are not one contiguous
// range.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.h"
#include "dataset/format/progress.h"
#include "dataset/format/range_reader.h"
#include "dataset/path_arena.h"

namespace gpufs {

struct TarEntry {
  std::string_view path;  // normalized, relative; held by the listing's `paths`
  uint64_t offset = 0;    // of the first data byte in the archive
  uint64_t size = 0;
};

struct TarListing {
  PathArena paths;
  std::vector<TarEntry> entries;  // regular files, in archive order
  size_t skipped = 0;             // symbolic links, devices, fifos, hard links to them
  size_t replaced = 0;            // files, links and the like a later member's path took
  bool nested = false;            // the archive was a tar of per-class tars
};

// Lists the archive at `path`. When every file in it is itself a tar (like
// ILSVRC2012_img_train.tar), the inner archives are listed instead, each as a folder named
// after it without ".tar".
// With `progress`, the walk counts the entries and archive bytes it has passed (a nested
// archive starts over for its inner ones, total_bytes then their sum).
Result<TarListing> ListTar(const std::filesystem::path& path, Progress* progress = nullptr);
// Another reader of the same archive, for walks that run at once; null when none can be
// had.
using ReaderFactory = std::function<std::unique_ptr<RangeReader>()>;
// With `more`, the inner archives of a nested one are walked `parallel` at once: each
// header read of a remote archive waits a request's round trip, and ImageNet's training
// archive has 1.28 M of them.
// The headers are read `chunk` bytes at a time, the data between them included: a local
// file is read in large pieces at the disk's sequential speed; a remote one header by header
// (the default), each read a round trip whatever its size.
inline constexpr size_t kLocalTarChunk = 4u << 20;
Result<TarListing> ListTar(RangeReader& reader, const ReaderFactory& more = {},
                           unsigned parallel = 1, size_t chunk = 512, Progress* progress = nullptr);

// True when the first block of `path` is a tar header.
bool LooksLikeTar(const std::filesystem::path& path);
bool LooksLikeTar(RangeReader& reader);
// The same of an archive's first bytes, already read (`got` of them at `head`).
bool LooksLikeTarBlock(const char* head, size_t got);

}  // namespace gpufs
