#include "dataset/format/tar.h"

#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <future>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "dataset/format/name_rules.h"
#include "dataset/format/tar_header.h"

namespace gpufs {
namespace {

uint64_t RoundUp(uint64_t n) { return (n + kTarBlock - 1) / kTarBlock * kTarBlock; }

bool IsExtended(TarKind kind) {
  return kind == TarKind::kLongName || kind == TarKind::kLongLink || kind == TarKind::kExtended ||
         kind == TarKind::kGlobal;
}

// What the extended headers before a member say of it.
struct Pending {
  std::string long_name;  // GNU 'L'
  std::string long_link;  // GNU 'K'
  PaxValues pax;          // pax 'x'
};

// What a member leaves at its path once extracted: a file (a hard link to a file is one,
// with the target's bytes), a folder, or something with no bytes to serve.
enum class Left { kFile, kFolder, kNoBytes };

struct Member {
  std::string_view path;  // normalized and prefixed; as written when it cannot be normalized
  uint64_t offset = 0;
  uint64_t size = 0;
  Left left = Left::kFile;
  bool replaced = false;  // a later member has the same path
};

// The members of one archive in order, and the latest member of each path: a hard link
// names whatever its target is at that point of the extraction, and the last member of a
// path is what the extraction leaves there. Paths are kept once, in an arena; the latest
// member of each is found by an open-addressed table of member numbers (4 bytes a slot,
// where a node-based map would take some 50 bytes a member), each slot with a byte of its
// path's hash, so that a probe seldom looks at another member's path (a cache miss each).
class Members {
 public:
  void Add(std::string_view path, uint64_t offset, uint64_t size, Left left) {
    if (2 * (members_.size() + 1) > slots_.size()) Grow();
    const auto number = static_cast<uint32_t>(members_.size());
    const uint64_t hash = XXH3_64bits(path.data(), path.size());
    const size_t at = Find(path, hash);
    uint32_t& slot = slots_[at];
    tags_[at] = Tag(hash);
    if (slot != kFree) {
      members_[slot].replaced = true;
      path = members_[slot].path;
    } else {
      path = arena_.Add(path);
    }
    slot = number;
    members_.push_back(Member{path, offset, size, left});
  }

  const Member* Latest(std::string_view path) const {
    if (slots_.empty()) return nullptr;
    const uint32_t slot = slots_[Find(path, XXH3_64bits(path.data(), path.size()))];
    return slot == kFree ? nullptr : &members_[slot];
  }

  size_t size() const { return members_.size(); }

  // Moves the files the extraction leaves into `out`, in archive order, and counts the
  // rest. A folder replaced (by a file, after it was emptied) is not worth a word.
  void Settle(TarListing& out) {
    std::vector<uint32_t>().swap(slots_);
    std::vector<uint8_t>().swap(tags_);
    size_t files = 0;
    for (const Member& m : members_) files += !m.replaced && m.left == Left::kFile;
    out.entries.reserve(out.entries.size() + files);
    // The members go as their entries come, so that the two are not held whole at once
    // (40 and 32 bytes a member): the deque's blocks are freed as it is emptied, and handed
    // back to the kernel now and then.
    for (size_t n = 1; !members_.empty(); members_.pop_front(), ++n) {
      const Member& m = members_.front();
      if (m.replaced) {
        out.replaced += m.left != Left::kFolder;
      } else if (m.left == Left::kFile) {
        out.entries.push_back(TarEntry{m.path, m.offset, m.size});
      } else {
        out.skipped += m.left == Left::kNoBytes;
      }
      if (n % kTrimEvery == 0) malloc_trim(0);
    }
    std::deque<Member>().swap(members_);
    out.paths.Append(std::move(arena_));
  }

 private:
  static constexpr uint32_t kFree = UINT32_MAX;
  static constexpr size_t kTrimEvery = 1u << 20;  // members

  // The slot of `path`: the one holding its member's number, or the free one where it goes.
  static uint8_t Tag(uint64_t hash) { return static_cast<uint8_t>(hash >> 56); }

  size_t Find(std::string_view path, uint64_t hash) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      if (slots_[i] == kFree) return i;
      if (tags_[i] == Tag(hash) && members_[slots_[i]].path == path) return i;
    }
  }

  void Grow() {
    std::vector<uint32_t> old(std::max<size_t>(1024, 2 * slots_.size()), kFree);
    old.swap(slots_);
    std::vector<uint8_t>(slots_.size()).swap(tags_);
    const size_t mask = slots_.size() - 1;
    for (uint32_t number : old) {
      if (number == kFree) continue;
      const std::string_view path = members_[number].path;
      const uint64_t hash = XXH3_64bits(path.data(), path.size());
      size_t i = hash & mask;
      while (slots_[i] != kFree) i = (i + 1) & mask;
      slots_[i] = number;
      tags_[i] = Tag(hash);
    }
  }

  PathArena arena_;
  std::deque<Member> members_;  // a deque, so that growing copies none
  std::vector<uint32_t> slots_;
  std::vector<uint8_t> tags_;
};

// Reads the archive front to back in pieces of `chunk` bytes: the headers of small members
// lie between their data, so reading everything in large pieces is what the disk does
// fastest, where a read per 512-byte header waits on each. While the walk parses one piece
// the next is read, so that the disk never waits on the parsing. A header past both (after
// a large member) starts a fresh piece there, skipping the data between. With a chunk of
// one block it reads each header alone and nothing ahead, as a remote archive wants.
class ChunkReader {
 public:
  ChunkReader(RangeReader& reader, size_t chunk)
      : reader_(reader), chunk_(std::max<size_t>(chunk, kTarBlock)) {}

  // Points at the `size` bytes at `pos`, valid until the next call, reading no further than
  // `end`; fewer than `size` only where `end` or the file comes first.
  Result<std::string_view> At(uint64_t pos, size_t size, uint64_t end) {
    if (!current_.Holds(pos, size)) {
      if (ahead_.valid()) {
        const Result<size_t> n = ahead_.get();
        if (!n) return n.error();
        next_.filled = *n;
        std::swap(current_, next_);
      }
      if (!current_.Holds(pos, size)) {
        const size_t want = static_cast<size_t>(
            std::min<uint64_t>(std::max(chunk_, size), end > pos ? end - pos : 0));
        if (current_.bytes.size() < want) current_.bytes.resize(want);
        auto n = reader_.ReadAt(pos, want, current_.bytes.data());
        if (!n) return n.error();
        current_.start = pos;
        current_.filled = *n;
      }
      ReadAhead(end);
    }
    const size_t at = static_cast<size_t>(pos - current_.start);
    return std::string_view(current_.bytes.data() + at, std::min(size, current_.filled - at));
  }

 private:
  struct Piece {
    std::vector<char> bytes;
    uint64_t start = 0;
    size_t filled = 0;
    bool Holds(uint64_t pos, size_t size) const {
      return pos >= start && pos + size <= start + filled;
    }
  };

  // Starts reading the piece after the current one.
  void ReadAhead(uint64_t end) {
    const uint64_t from = current_.start + current_.filled;
    if (chunk_ == kTarBlock || current_.filled < chunk_ || from >= end) return;
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk_, end - from));
    if (next_.bytes.size() < want) next_.bytes.resize(want);
    next_.start = from;
    next_.filled = 0;
    ahead_ = std::async(std::launch::async, [this, from, want] {
      return reader_.ReadAt(from, want, next_.bytes.data());
    });
  }

  RangeReader& reader_;
  size_t chunk_;
  Piece current_;
  Piece next_;
  std::future<Result<size_t>> ahead_;  // reading `next_`; last, so that it ends first
};

class TarWalker {
 public:
  TarWalker(RangeReader& reader, size_t chunk, Progress* progress)
      : chunk_(reader, chunk), label_(reader.label()), progress_(progress) {}

  // Lists the archive lying in [base, base + limit) of the file.
  Status Walk(uint64_t base, uint64_t limit, const std::string& prefix, TarListing& out) {
    Members members;
    Pending pending;
    end_ = base + limit;
    uint64_t pos = base;
    while (pos < base + limit) {
      // An archive may end right after its last entry (some writers omit the end
      // marker), but not inside a header.
      if (pos + kTarBlock > base + limit)
        return Bad(pos, "the archive ends in the middle of a header");
      auto read = ReadBlock(pos);
      if (!read) return read.error();
      const char* block = *read;
      if (AllZeroBlock(block)) break;
      if (!TarChecksumOk(block)) {
        return Bad(pos, "bad header checksum: not a tar archive, or damaged");
      }
      const TarKind kind = KindOf(block[156]);
      auto size = DataSize(block, IsExtended(kind) ? PaxValues{} : pending.pax);
      if (!size) return Bad(pos, "the size field is not a valid number");
      const uint64_t data = pos + kTarBlock;
      if (*size > base + limit - data) {
        return Bad(pos, "an entry runs past the end of the archive");
      }
      const uint64_t before = std::exchange(pos, data + RoundUp(*size));
      if (progress_) {
        progress_->bytes += pos - before;
        if (kind == TarKind::kFile) ++progress_->files;
      }
      Status s = IsExtended(kind)
                     ? ReadExtended(kind, data, *size, pending)
                     : AddMember(block, data, *size, prefix, std::exchange(pending, {}), members);
      if (!s) return s;
    }
    // The end marker and the padding after it are walked too.
    if (progress_) progress_->bytes += base + limit - std::min(pos, base + limit);
    members.Settle(out);
    return Ok{};
  }

  Result<const char*> ReadBlock(uint64_t pos) {
    auto block = chunk_.At(pos, kTarBlock, end_);
    if (!block) return block.error();
    if (block->size() == kTarBlock) return block->data();
    return Bad(pos, "the archive ends in the middle of a header");
  }

 private:
  // How many data bytes follow the header: its size field, or the pax size before it;
  // none for links, devices, fifos and folders (GNU tar reads no data after them).
  static std::optional<uint64_t> DataSize(const char* block, const PaxValues& pax) {
    uint64_t size = 0;
    if (!ParseTarNumber(block + 124, 12, &size)) return std::nullopt;
    if (!TypeHasData(block[156])) return 0;
    return pax.size.value_or(size);
  }

  // Keeps what an 'L', 'K' or 'x' header says of the next member; checks a 'g' header,
  // which says nothing of it.
  Status ReadExtended(TarKind kind, uint64_t data, uint64_t size, Pending& pending) {
    auto text = ReadText(data, size);
    if (!text) return text.error();
    const uint64_t header = data - kTarBlock;
    if (kind == TarKind::kLongName) pending.long_name = text->substr(0, text->find('\0'));
    if (kind == TarKind::kLongLink) pending.long_link = text->substr(0, text->find('\0'));
    if (kind == TarKind::kExtended) {
      pending.pax = PaxValues{};  // a second one replaces the first, in GNU tar and bsdtar
      if (std::string why = ParsePax(*text, &pending.pax); !why.empty()) return Bad(header, why);
    }
    if (kind == TarKind::kGlobal) {
      PaxValues global;
      if (std::string why = ParsePax(*text, &global); !why.empty()) return Bad(header, why);
      if (std::string_view key = GlobalPaxConflict(global); !key.empty()) {
        return Bad(header, fmt::format("a global pax header sets '{}' for every later member, "
                                       "which tar readers do not agree on",
                                       key));
      }
    }
    return Ok{};
  }

  Status AddMember(const char* block, uint64_t data, uint64_t size, const std::string& prefix,
                   const Pending& pending, Members& members) {
    const std::string name = !pending.pax.path.empty()    ? pending.pax.path
                             : !pending.long_name.empty() ? pending.long_name
                                                          : TarHeaderName(block);
    const uint64_t header = data - kTarBlock;
    const TarKind kind = pending.pax.sparse ? TarKind::kSparse : KindOf(block[156], name);
    switch (kind) {
      case TarKind::kFile: {
        auto path = Normalize(name, data);
        if (!path) return path.error();
        members.Add(prefix + *path, data, size, Left::kFile);
        return Ok{};
      }
      case TarKind::kHardLink: {
        const std::string target = !pending.pax.linkpath.empty() ? pending.pax.linkpath
                                   : !pending.long_link.empty()  ? pending.long_link
                                                                 : TarHeaderLinkName(block);
        return AddLink(name, target, prefix, members, data);
      }
      case TarKind::kFolder:
        members.Add(LenientPath(name, prefix), 0, 0, Left::kFolder);
        return Ok{};
      case TarKind::kNoBytes:
        members.Add(LenientPath(name, prefix), 0, 0, Left::kNoBytes);
        return Ok{};
      case TarKind::kSparse: {
        const std::string& real = pending.pax.sparse_name.empty() ? name : pending.pax.sparse_name;
        return Bad(header, fmt::format("'{}' is a sparse file, whose bytes are not stored as one "
                                       "range; re-create the archive without holes in its files "
                                       "(copy them with cp --sparse=never; GNU tar without "
                                       "--sparse)",
                                       Printable(real)));
      }
      case TarKind::kContinued:
        return Bad(header, fmt::format("'{}' continues a file from another volume of a "
                                       "multi-volume archive, whose bytes are not all here",
                                       Printable(name)));
      default:
        return Ok{};  // a volume label
    }
  }

  Result<std::string> ReadText(uint64_t pos, uint64_t size) {
    if (size > (16u << 20)) return Bad(pos, "an extended header is implausibly large");
    auto text = chunk_.At(pos, size, end_);
    if (!text) return text.error();
    if (text->size() != size) return Bad(pos, "the archive ends inside a header");
    return std::string(*text);
  }

  Result<std::string> Normalize(std::string_view name, uint64_t pos) {
    while (name.starts_with("./")) name.remove_prefix(2);
    while (name.starts_with('/')) name.remove_prefix(1);
    auto path = NormalizeRelativePath(name);
    if (!path) {
      return Bad(pos, fmt::format("entry '{}': {}", Printable(name), path.error().message));
    }
    return path;
  }

  // The path of a member that serves no bytes: a name no file can have ("./", "a/../b")
  // is kept as written, so that it replaces nothing and nothing replaces it.
  std::string LenientPath(std::string_view name, const std::string& prefix) {
    auto path = Normalize(name, 0);
    return prefix + (path ? *path : std::string(name));
  }

  // A hard link names what its target is at this point of the extraction: a file's bytes,
  // or, for a symbolic link, device or fifo, another of them; tar cannot link a folder.
  Status AddLink(const std::string& name, const std::string& target, const std::string& prefix,
                 Members& members, uint64_t pos) {
    auto path = Normalize(name, pos);
    auto to = Normalize(target, pos);
    if (!path) return path.error();
    if (!to) return to.error();
    const Member* found = members.Latest(prefix + *to);
    if (!found) {
      return Bad(pos, fmt::format("hard link '{}' points to '{}', which is not earlier in the "
                                  "archive",
                                  Printable(name), Printable(target)));
    }
    const bool file = found->left == Left::kFile;
    members.Add(prefix + *path, file ? found->offset : 0, file ? found->size : 0,
                file ? Left::kFile : Left::kNoBytes);
    return Ok{};
  }

  Error Bad(uint64_t pos, std::string_view why) const {
    return Error{EINVAL, fmt::format("cannot read {}: at byte {}: {}", label_, pos, why)};
  }

  ChunkReader chunk_;
  uint64_t end_ = 0;  // of the archive being walked
  std::string label_;
  Progress* const progress_;  // null: nobody watches
};

// Keeps the last entry of each path: inner archives "a.tar" holding "b/c" and "a/b.tar"
// holding "c" both name "a/b/c".
void DropReplaced(TarListing& listing) {
  std::vector<TarEntry>& entries = listing.entries;
  std::unordered_map<std::string_view, size_t> last;
  for (size_t i = 0; i < entries.size(); ++i) last[entries[i].path] = i;
  if (last.size() == entries.size()) return;
  std::vector<TarEntry> kept;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (last[entries[i].path] == i) kept.push_back(entries[i]);
  }
  listing.replaced += entries.size() - kept.size();
  entries = std::move(kept);
}

// Whether every file is an archive whose name, less ".tar", can name a folder ("a/.tar"
// cannot).
bool AllInnerTars(const std::vector<TarEntry>& entries) {
  return !entries.empty() && std::all_of(entries.begin(), entries.end(), [](const TarEntry& e) {
    const std::string_view name = std::string_view(e.path).substr(e.path.rfind('/') + 1);
    return name.size() > 4 && name.ends_with(".tar");
  });
}

// Lists each inner archive of `outer` into its own listing, `parallel` walks at once
// (each with a reader of its own), and appends them in archive order.
Status ListInnerTars(RangeReader& reader, const ReaderFactory& more, unsigned parallel,
                     size_t chunk, Progress* progress, const TarListing& outer, TarListing& inner) {
  const std::vector<TarEntry>& tars = outer.entries;
  std::vector<TarListing> parts(tars.size());
  std::vector<Status> results(tars.size(), Ok{});
  std::atomic<size_t> next{0};
  if (progress) {
    uint64_t total = 0;
    for (const TarEntry& t : tars) total += t.size;
    progress->files = 0;
    progress->bytes = 0;
    progress->total_bytes = total;
  }
  auto walk_some = [&](RangeReader& r) {
    TarWalker walker(r, chunk, progress);
    for (size_t i = next++; i < tars.size(); i = next++) {
      const std::string folder = std::string(tars[i].path.substr(0, tars[i].path.size() - 4)) + "/";
      results[i] = walker.Walk(tars[i].offset, tars[i].size, folder, parts[i]);
      if (!results[i]) next = tars.size();  // the first failure ends the listing
    }
  };
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<RangeReader>> readers;
  for (unsigned t = 1; more && t < std::min<size_t>(parallel, tars.size()); ++t) {
    auto r = more();
    if (!r) break;
    readers.push_back(std::move(r));
    threads.emplace_back(walk_some, std::ref(*readers.back()));
  }
  walk_some(reader);
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < tars.size(); ++i) {
    if (!results[i]) return results[i];
    inner.skipped += parts[i].skipped;
    inner.replaced += parts[i].replaced;
    std::move(parts[i].entries.begin(), parts[i].entries.end(), std::back_inserter(inner.entries));
    inner.paths.Append(std::move(parts[i].paths));
  }
  return Ok{};
}

}  // namespace

Result<TarListing> ListTar(RangeReader& reader, const ReaderFactory& more, unsigned parallel,
                           size_t chunk, Progress* progress) {
  if (progress) progress->total_bytes = reader.size();
  TarWalker walker(reader, chunk, progress);
  TarListing outer;
  Status s = walker.Walk(0, reader.size(), "", outer);
  if (s && AllInnerTars(outer.entries)) {
    TarListing inner;
    inner.nested = true;
    inner.skipped = outer.skipped;
    inner.replaced = outer.replaced;
    s = ListInnerTars(reader, more, parallel, chunk, progress, outer, inner);
    DropReplaced(inner);
    outer = std::move(inner);
  }
  if (!s) return s.error();
  // The walk's members lay in small blocks between the arena's: freed, they would stay in
  // the heap (and counted in the process's memory) below the paths that live on.
  malloc_trim(0);
  return outer;
}

Result<TarListing> ListTar(const std::filesystem::path& path, Progress* progress) {
  auto reader = OpenFileReader(path);
  if (!reader) return reader.error();
  return ListTar(**reader, {}, 1, kLocalTarChunk, progress);
}

bool LooksLikeTarBlock(const char* head, size_t got) {
  return got >= kTarBlock && !AllZeroBlock(head) && TarChecksumOk(head);
}

bool LooksLikeTar(RangeReader& reader) {
  char block[kTarBlock];
  auto n = reader.ReadAt(0, kTarBlock, block);
  return n && LooksLikeTarBlock(block, *n);
}

bool LooksLikeTar(const std::filesystem::path& path) {
  auto reader = OpenFileReader(path);
  return reader && LooksLikeTar(**reader);
}

}  // namespace gpufs
