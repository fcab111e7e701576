#include "dataset/compressed/zip.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "dataset/format/name_rules.h"

namespace gpufs {

// Reading a zip's central directory and local headers (APPNOTE.TXT 6.3.10, sections 4.3
// and 4.5.3 for zip64).
namespace {

constexpr uint32_t kLocalSignature = 0x04034b50;
constexpr uint32_t kCentralSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kEnd64Signature = 0x06064b50;
constexpr uint32_t kLocatorSignature = 0x07064b50;
constexpr size_t kLocalSize = 30;
constexpr size_t kCentralSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kLocatorSize = 20;
constexpr size_t kEnd64Size = 56;
constexpr size_t kMaxComment = 65535;
constexpr uint16_t kZip64Extra = 0x0001;
constexpr uint16_t kUnixHost = 3;
constexpr uint16_t kDosHost = 0;
constexpr uint32_t kDosFolder = 0x10;
constexpr uint16_t kEncrypted = 1;
constexpr uint16_t kDescriptor = 8;
// The central directory is read this much at a time (an entry is at most 46 + 3 * 65535
// bytes); local headers in windows this large, so that small members' headers come several
// to a read.
constexpr size_t kCentralChunk = 1u << 20;
constexpr size_t kLocalWindow = 64u << 10;

uint16_t Le16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint32_t Le32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
uint64_t Le64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// Where the central directory lies, and where what follows it (the end records) starts.
struct Directory {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t entries = 0;
  uint64_t end = 0;
};

// What a member leaves at its path once extracted (folders are implied, not kept).
enum class Left : uint8_t { kFile, kNoBytes };

struct Central {
  std::string_view path;  // normalized (as written for members with no bytes), in the arena
  uint64_t local = 0;     // offset of the local header
  uint64_t stored_size = 0;
  uint64_t size = 0;
  uint32_t crc32 = 0;
  uint16_t method = 0;
  uint16_t flags = 0;
  Left left = Left::kFile;
  bool replaced = false;
};

std::string MethodName(uint16_t method) {
  switch (method) {
    case 9:
      return "deflate64 (method 9)";
    case 12:
      return "bzip2 (method 12)";
    case 14:
      return "LZMA (method 14)";
    case 93:
      return "zstd (method 93)";
    case 95:
      return "xz (method 95)";
    default:
      return fmt::format("method {}", method);
  }
}

// Reads the zip64 extended information of an extra field: the 8-byte values of the fields
// in `wide` (those whose 32-bit value is saturated, in the order the format sets), then the
// 4-byte disk number where `disk` is set. False when the field is missing or short.
bool ReadZip64(std::string_view extra, const std::vector<uint64_t*>& wide, uint64_t* disk) {
  while (extra.size() >= 4) {
    const uint16_t id = Le16(extra.data());
    const size_t size = Le16(extra.data() + 2);
    if (size > extra.size() - 4) return false;
    if (id == kZip64Extra) {
      std::string_view data = extra.substr(4, size);
      for (uint64_t* field : wide) {
        if (data.size() < 8) return false;
        *field = Le64(data.data());
        data.remove_prefix(8);
      }
      if (disk) {
        if (data.size() < 4) return false;
        *disk = Le32(data.data());
      }
      return true;
    }
    extra.remove_prefix(4 + size);
  }
  return wide.empty() && !disk;
}

std::string_view Unprefixed(std::string_view name) {
  for (;;) {
    if (name.starts_with("./")) {
      name.remove_prefix(2);
    } else if (name.starts_with('/')) {
      name.remove_prefix(1);
    } else {
      return name;
    }
  }
}

// Reads [pos, pos + size) through a buffer of at least `chunk` bytes, so that what lies
// close together costs one read.
class Window {
 public:
  Window(RangeReader& reader, size_t chunk) : reader_(reader), chunk_(chunk) {}

  // The `size` bytes at `pos`, valid until the next call; fewer where `limit` (or the file)
  // comes first.
  Result<std::string_view> At(uint64_t pos, size_t size, uint64_t limit) {
    if (pos >= limit) return std::string_view();
    size = static_cast<size_t>(std::min<uint64_t>(size, limit - pos));
    if (pos < start_ || pos + size > start_ + filled_) {
      const auto want =
          static_cast<size_t>(std::min<uint64_t>(std::max(chunk_, size), limit - pos));
      if (bytes_.size() < want) bytes_.resize(want);
      auto n = reader_.ReadAt(pos, want, bytes_.data());
      if (!n) return n.error();
      start_ = pos;
      filled_ = *n;
    }
    const auto at = static_cast<size_t>(pos - start_);
    return std::string_view(bytes_.data() + at, std::min(size, filled_ - at));
  }

 private:
  RangeReader& reader_;
  size_t chunk_;
  std::vector<char> bytes_;
  uint64_t start_ = 0;
  size_t filled_ = 0;
};

class ZipWalker {
 public:
  ZipWalker(RangeReader& reader, Progress* progress, const ReaderFactory& more, unsigned parallel)
      : reader_(reader),
        label_(reader.label()),
        size_(reader.size()),
        progress_(progress),
        more_(more),
        parallel_(std::max(1u, parallel)) {}

  Result<ZipListing> List() {
    if (progress_) progress_->total_bytes = size_;
    auto dir = FindDirectory();
    if (!dir) return dir.error();
    std::vector<Central> members;
    ZipListing out;
    if (Status s = ReadCentral(*dir, members, out.files.paths); !s) return s.error();
    std::vector<const Central*> kept = Settle(members, out.files);
    if (Status s = ReadLocals(*dir, kept, out); !s) return s.error();
    if (progress_) progress_->bytes = size_;
    return out;
  }

 private:
  Error Bad(std::string_view why) const {
    return Error{EINVAL, fmt::format("cannot read {}: {}", label_, why)};
  }
  Error BadMember(std::string_view name, std::string_view why) const {
    return Error{EINVAL,
                 fmt::format("cannot read {}: member '{}': {}", label_, Printable(name), why)};
  }
  Error Split() const {
    return Bad(
        "the archive is split over several disks (a multi-part zip), whose parts are not all "
        "here; join them with zip -s 0 archive.zip --out whole.zip");
  }

  // The end-of-central-directory record is the last 22 bytes but for a comment of up to
  // 64 KiB; searched from the end, the first whose comment ends the file is it.
  Result<Directory> FindDirectory() {
    if (size_ < kEndSize) return Bad("too short to be a zip archive");
    const auto tail = static_cast<size_t>(std::min<uint64_t>(size_, kEndSize + kMaxComment));
    std::vector<char> bytes(tail);
    auto n = reader_.ReadAt(size_ - tail, tail, bytes.data());
    if (!n) return n.error();
    if (*n != tail) return Bad("the archive ended while it was read");
    for (size_t at = tail - kEndSize + 1; at-- > 0;) {
      const char* p = bytes.data() + at;
      if (Le32(p) == kEndSignature && at + kEndSize + Le16(p + 20) == tail) {
        return ReadEnd(p, size_ - tail + at);
      }
    }
    return Bad("no end-of-central-directory record: not a zip archive, or truncated");
  }

  Result<Directory> ReadEnd(const char* p, uint64_t at) {
    Directory dir{Le32(p + 16), Le32(p + 12), Le16(p + 10), at};
    const bool wide = Le16(p + 4) == 0xFFFF || Le16(p + 6) == 0xFFFF || Le16(p + 8) == 0xFFFF ||
                      dir.entries == 0xFFFF || dir.size == 0xFFFFFFFF || dir.offset == 0xFFFFFFFF;
    char locator[kLocatorSize];
    if (at >= kLocatorSize) {
      auto n = reader_.ReadAt(at - kLocatorSize, kLocatorSize, locator);
      if (!n) return n.error();
      if (*n == kLocatorSize && Le32(locator) == kLocatorSignature) {
        return ReadEnd64(locator, at - kLocatorSize);
      }
    }
    if (wide)
      return Bad("the end-of-central-directory record needs a zip64 record, which is missing");
    if (Le16(p + 4) != 0 || Le16(p + 6) != 0 || Le16(p + 8) != dir.entries) return Split();
    return Checked(dir);
  }

  Result<Directory> ReadEnd64(const char* locator, uint64_t at) {
    if (Le32(locator + 4) != 0 || Le32(locator + 16) > 1) return Split();
    const uint64_t offset = Le64(locator + 8);
    if (offset > at || at - offset < kEnd64Size) {
      return Bad("the zip64 locator points past itself");
    }
    char p[kEnd64Size];
    auto n = reader_.ReadAt(offset, kEnd64Size, p);
    if (!n) return n.error();
    if (*n != kEnd64Size || Le32(p) != kEnd64Signature) {
      return Bad(fmt::format("no zip64 end-of-central-directory record at byte {}", offset));
    }
    if (Le32(p + 16) != 0 || Le32(p + 20) != 0 || Le64(p + 24) != Le64(p + 32)) return Split();
    return Checked(Directory{Le64(p + 48), Le64(p + 40), Le64(p + 32), offset});
  }

  Result<Directory> Checked(const Directory& dir) {
    if (dir.offset > dir.end || dir.size > dir.end - dir.offset) {
      return Bad(
          fmt::format("the central directory ({} bytes at byte {}) runs past its end "
                      "record (at byte {}): truncated, or data before the archive",
                      dir.size, dir.offset, dir.end));
    }
    if (dir.entries > dir.size / kCentralSize || dir.entries >= UINT32_MAX) {
      return Bad(
          fmt::format("the end record counts {} entries, more than its {}-byte central "
                      "directory holds",
                      dir.entries, dir.size));
    }
    return dir;
  }

  Status ReadCentral(const Directory& dir, std::vector<Central>& members, PathArena& arena) {
    Window window(reader_, kCentralChunk);
    const uint64_t end = dir.offset + dir.size;
    uint64_t pos = dir.offset;
    members.reserve(dir.entries);
    for (uint64_t i = 0; i < dir.entries; ++i) {
      auto head = window.At(pos, kCentralSize, end);
      if (!head) return head.error();
      if (head->size() < kCentralSize || Le32(head->data()) != kCentralSignature) {
        return Bad(
            fmt::format("the central directory is truncated or damaged: entry {} of {} "
                        "(at byte {}) is not a central header",
                        i + 1, dir.entries, pos));
      }
      const size_t length = kCentralSize + Le16(head->data() + 28) + Le16(head->data() + 30) +
                            Le16(head->data() + 32);
      auto entry = window.At(pos, length, end);
      if (!entry) return entry.error();
      if (entry->size() < length) {
        return Bad(
            fmt::format("the central directory is truncated: entry {} of {} (at byte {}) "
                        "runs past its end",
                        i + 1, dir.entries, pos));
      }
      if (Status s = AddCentral(entry->data(), members, arena); !s) return s;
      pos += length;
      if (progress_) progress_->bytes += length;
    }
    if (pos != end) {
      return Bad(
          fmt::format("the central directory's {} entries take {} bytes, where the end "
                      "record says {}",
                      dir.entries, pos - dir.offset, dir.size));
    }
    return Ok{};
  }

  Status AddCentral(const char* p, std::vector<Central>& members, PathArena& arena) {
    const std::string_view name(p + kCentralSize, Le16(p + 28));
    const std::string_view extra(p + kCentralSize + name.size(), Le16(p + 30));
    const uint16_t host = Le16(p + 4) >> 8;
    const uint32_t mode = Le32(p + 38) >> 16;
    if (name.ends_with('/') || (host == kUnixHost && S_ISDIR(mode)) ||
        (host == kDosHost && (Le32(p + 38) & kDosFolder))) {
      return Ok{};  // a folder, implied by the paths of its files
    }
    Central m{{},           Le32(p + 42), Le32(p + 20), Le32(p + 24),
              Le32(p + 16), Le16(p + 10), Le16(p + 8)};
    if (host == kUnixHost && (mode & S_IFMT) != 0 && !S_ISREG(mode)) {
      auto path = NormalizeRelativePath(Unprefixed(name));
      m.path = arena.Add(path ? *path : name);  // a name no file has replaces nothing
      m.left = Left::kNoBytes;
      members.push_back(m);
      return Ok{};
    }
    uint64_t disk = Le16(p + 34);
    std::vector<uint64_t*> wide;
    if (m.size == 0xFFFFFFFF) wide.push_back(&m.size);
    if (m.stored_size == 0xFFFFFFFF) wide.push_back(&m.stored_size);
    if (m.local == 0xFFFFFFFF) wide.push_back(&m.local);
    if (!ReadZip64(extra, wide, disk == 0xFFFF ? &disk : nullptr)) {
      return BadMember(name,
                       "its sizes or offset need a zip64 extra field, which is missing "
                       "or too short");
    }
    if (disk != 0) return Split();
    if (Status s = CheckServable(name, m); !s) return s;
    auto path = NormalizeRelativePath(Unprefixed(name));
    if (!path) return BadMember(name, path.error().message);
    m.path = arena.Add(*path);
    members.push_back(m);
    return Ok{};
  }

  Status CheckServable(std::string_view name, const Central& m) const {
    if (m.flags & kEncrypted) {
      return BadMember(name,
                       "it is encrypted, which gpufs cannot serve; store the archive "
                       "without a password");
    }
    if (m.method != 0 && m.method != 8) {
      return BadMember(name, fmt::format("it is compressed with {}, which gpufs does not "
                                         "decode; recompress with zip -Z deflate or store it",
                                         MethodName(m.method)));
    }
    if (m.method == 0 && m.stored_size != m.size) {
      return BadMember(name, fmt::format("it is stored uncompressed, yet its stored size ({}) "
                                         "differs from its size ({})",
                                         m.stored_size, m.size));
    }
    return Ok{};
  }

  // Marks every member a later one of the same path replaces, counts them and the members
  // with no bytes, and returns the files left, by offset.
  static std::vector<const Central*> Settle(std::vector<Central>& members, TarListing& files) {
    std::vector<uint32_t> order(members.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return members[a].path < members[b].path; });
    for (size_t i = 1; i < order.size(); ++i) {
      Central& earlier = members[order[i - 1]];
      if (earlier.path == members[order[i]].path) earlier.replaced = true;
    }
    std::vector<const Central*> kept;
    for (const Central& m : members) {
      if (m.replaced) {
        ++files.replaced;
      } else if (m.left == Left::kNoBytes) {
        ++files.skipped;
      } else {
        kept.push_back(&m);
      }
    }
    std::stable_sort(kept.begin(), kept.end(),
                     [](const Central* a, const Central* b) { return a->local < b->local; });
    return kept;
  }

  // Where each kept member's data start, its local header checked. A remote archive pays a
  // round trip a window, so runs of members are walked at once, each with a reader of its
  // own (a run no reader could be had for is walked here, after the first).
  // A run stops at its first failure, leaving that member's offset and the rest kUnread;
  // the error is the run's, told once the members before it were checked (an overlap is
  // the better reason for a local header that is not there).
  static constexpr uint64_t kUnread = UINT64_MAX;
  struct Offsets {
    std::vector<uint64_t> data;  // by kept member
    std::vector<Status> runs;
  };
  Offsets DataOffsets(const Directory& dir, const std::vector<const Central*>& kept) {
    std::vector<uint64_t> data(kept.size(), kUnread);
    const size_t runs = std::min<size_t>(parallel_, std::max<size_t>(1, kept.size() / 256));
    std::vector<Status> results(runs, Ok{});
    const auto walk = [&](RangeReader& reader, size_t run) {
      Window window(reader, kLocalWindow);
      for (size_t i = kept.size() * run / runs; i < kept.size() * (run + 1) / runs; ++i) {
        auto at = ReadLocal(window, *kept[i], dir.offset);
        if (!at) {
          results[run] = at.error();
          return;
        }
        data[i] = *at;
        if (progress_) {
          progress_->bytes += *at + kept[i]->stored_size - kept[i]->local;
          ++progress_->files;
        }
      }
    };
    std::vector<std::unique_ptr<RangeReader>> readers;
    std::vector<std::thread> threads;
    for (size_t run = 1; more_ && run < runs; ++run) {
      auto reader = more_();
      if (!reader) break;
      readers.push_back(std::move(reader));
      threads.emplace_back(walk, std::ref(*readers.back()), run);
    }
    walk(reader_, 0);
    for (size_t run = threads.size() + 1; run < runs; ++run) walk(reader_, run);
    for (std::thread& t : threads) t.join();
    return Offsets{std::move(data), std::move(results)};
  }

  Status ReadLocals(const Directory& dir, const std::vector<const Central*>& kept,
                    ZipListing& out) {
    const Offsets offsets = DataOffsets(dir, kept);
    out.files.entries.reserve(kept.size());
    out.parts.reserve(kept.size());
    uint64_t covered = 0;  // the end of the last member's data
    const Central* before = nullptr;
    for (size_t i = 0; i < kept.size(); ++i) {
      const Central* m = kept[i];
      if (m->local < covered) {
        return BadMember(m->path, fmt::format("its local header (at byte {}) lies inside the "
                                              "data of '{}': the members overlap",
                                              m->local, Printable(before->path)));
      }
      const uint64_t* data = &offsets.data[i];
      if (*data == kUnread) {
        for (const Status& s : offsets.runs) {
          if (!s) return s;  // runs fail in order of their members
        }
        return BadMember(m->path, "its local header was not read");
      }
      if (m->stored_size > dir.offset - *data) {
        return BadMember(m->path, fmt::format("its data ({} bytes at byte {}) run past the "
                                              "start of the central directory (byte {})",
                                              m->stored_size, *data, dir.offset));
      }
      covered = *data + m->stored_size;
      before = m;
      out.files.entries.push_back(TarEntry{m->path, *data, m->size});
      out.parts.push_back(ZipPart{*data, m->stored_size, m->size, m->crc32, m->method});
    }
    return Ok{};
  }

  // Checks the member's local header against its central entry; returns where its data
  // start.
  Result<uint64_t> ReadLocal(Window& window, const Central& m, uint64_t limit) {
    auto head = window.At(m.local, kLocalSize, limit);
    if (!head) return head.error();
    if (head->size() < kLocalSize) {
      return BadMember(m.path, fmt::format("its local header (at byte {}) runs past the start "
                                           "of the central directory",
                                           m.local));
    }
    if (Le32(head->data()) != kLocalSignature) {
      return BadMember(m.path, fmt::format("no local header at byte {}, where the central "
                                           "directory puts it",
                                           m.local));
    }
    const size_t length = kLocalSize + Le16(head->data() + 26) + Le16(head->data() + 28);
    auto local = window.At(m.local, length, limit);
    if (!local) return local.error();
    if (local->size() < length) {
      return BadMember(m.path, fmt::format("its local header (at byte {}) runs past the start "
                                           "of the central directory",
                                           m.local));
    }
    if (std::string why = LocalMismatch(*local, m); !why.empty()) {
      return BadMember(m.path, fmt::format("its local header (at byte {}) disagrees with the "
                                           "central directory: {}",
                                           m.local, why));
    }
    return m.local + length;
  }

  // Why the local header `p` does not describe `m`; empty when it does.
  static std::string LocalMismatch(std::string_view p, const Central& m) {
    const std::string_view name = p.substr(kLocalSize, Le16(p.data() + 26));
    if (name != m.path) {
      auto path = NormalizeRelativePath(Unprefixed(name));
      if (!path || *path != m.path) return fmt::format("it names '{}'", Printable(name));
    }
    const uint16_t method = Le16(p.data() + 8);
    if (method != m.method) {
      return fmt::format("its method is {}, where the central directory says {}", method, m.method);
    }
    if ((Le16(p.data() + 6) | m.flags) & kDescriptor) return {};  // sizes follow the data
    uint64_t stored_size = Le32(p.data() + 18);
    uint64_t size = Le32(p.data() + 22);
    // A local zip64 field holds both sizes, whichever is saturated.
    std::vector<uint64_t*> wide;
    if (size == 0xFFFFFFFF || stored_size == 0xFFFFFFFF) wide = {&size, &stored_size};
    if (!ReadZip64(p.substr(kLocalSize + name.size()), wide, nullptr)) {
      return "its zip64 extra field is missing or too short";
    }
    if (Le32(p.data() + 14) != m.crc32) {
      return fmt::format("its CRC-32 is {:08x}, where the central directory says {:08x}",
                         Le32(p.data() + 14), m.crc32);
    }
    if (stored_size != m.stored_size || size != m.size) {
      return fmt::format(
          "its sizes are {} stored and {} decoded, where the central directory "
          "says {} and {}",
          stored_size, size, m.stored_size, m.size);
    }
    return {};
  }

  RangeReader& reader_;
  std::string label_;
  uint64_t size_;
  Progress* const progress_;  // null: nobody watches
  const ReaderFactory more_;  // more readers of the archive, for walks at once
  const unsigned parallel_;
};

}  // namespace

bool LooksLikeZip(RangeReader& reader) {
  char head[4];
  auto n = reader.ReadAt(0, sizeof(head), head);
  if (!n || *n != sizeof(head)) return false;
  return Le32(head) == kLocalSignature ||
         (Le32(head) == kEndSignature && reader.size() >= kEndSize);
}

Result<ZipListing> ListZip(RangeReader& reader, Progress* progress, const ReaderFactory& more,
                           unsigned parallel) {
  return ZipWalker(reader, progress, more, parallel).List();
}

}  // namespace gpufs
