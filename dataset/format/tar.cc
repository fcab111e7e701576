#include "dataset/format/tar.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstring>
#include <thread>
#include <unordered_map>

#include "dataset/format/name_rules.h"

namespace gpufs {
namespace {

constexpr uint64_t kBlock = 512;

uint64_t RoundUp(uint64_t n) { return (n + kBlock - 1) / kBlock * kBlock; }

std::string_view Field(const char* block, size_t offset, size_t size) {
  std::string_view field(block + offset, size);
  return field.substr(0, field.find('\0'));
}

// Octal, space/NUL padded; or base-256 (GNU) when the top bit of the first byte is set.
// False for anything else: a negative base-256 number, a value past 63 bits, a field with
// no digits or with garbage between them. A lenient reader here is how a damaged header
// turns into a size that wraps the walk back to the archive's start.
bool ParseNumber(const char* p, size_t size, uint64_t* out) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] & 0x80) {
    if (u[0] & 0x40) return false;  // negative
    uint64_t v = u[0] & 0x3f;
    for (size_t i = 1; i < size; ++i) {
      if (v >> 55) return false;
      v = (v << 8) | u[i];
    }
    *out = v;
    return true;
  }
  // Leading spaces, octal digits, then only spaces and NULs; a blank field reads as 0.
  size_t i = 0;
  while (i < size && p[i] == ' ') ++i;
  uint64_t v = 0;
  for (; i < size && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v >> 60) return false;
    v = v * 8 + static_cast<uint64_t>(p[i] - '0');
  }
  for (; i < size; ++i) {
    if (p[i] != ' ' && p[i] != '\0') return false;
  }
  *out = v;
  return true;
}

// A decimal number of a pax record: digits only, no sign, no overflow.
bool ParseDecimal(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

bool ChecksumOk(const char* block) {
  uint64_t stored = 0;
  if (!ParseNumber(block + 148, 8, &stored)) return false;
  uint64_t sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(block[i]);
  }
  return sum == stored;
}

bool AllZero(const char* block) {
  return std::all_of(block, block + kBlock, [](char c) { return c == 0; });
}

// Values of a pax extended header that matter here.
struct PaxValues {
  std::string path;
  bool has_size = false;
  uint64_t size = 0;
};

// Parses "<length> <key>=<value>\n" records; empty when they are well formed, else why not.
std::string ParsePax(std::string_view records, PaxValues* pax) {
  while (!records.empty()) {
    const size_t space = records.find(' ');
    uint64_t length = 0;
    if (space == std::string_view::npos || !ParseDecimal(records.substr(0, space), &length)) {
      return "a pax record does not start with its length";
    }
    if (length <= space + 1 || length > records.size()) {
      return fmt::format("a pax record's length {} does not fit the {} bytes left", length,
                         records.size());
    }
    if (records[length - 1] != '\n') return "a pax record does not end with a newline";
    std::string_view record = records.substr(space + 1, length - space - 2);
    records.remove_prefix(length);
    const size_t eq = record.find('=');
    if (eq == std::string_view::npos) return "a pax record has no '='";
    const std::string_view key = record.substr(0, eq);
    const std::string_view value = record.substr(eq + 1);
    if (key == "path") pax->path = value;
    if (key == "size") {
      if (!ParseDecimal(value, &pax->size)) {
        return fmt::format("pax size '{}' is not a number that fits 64 bits", Printable(value));
      }
      pax->has_size = true;
    }
  }
  return {};
}

class TarWalker {
 public:
  explicit TarWalker(RangeReader& reader) : reader_(reader), label_(reader.label()) {}

  // Lists the archive lying in [base, base + limit) of the file.
  Status Walk(uint64_t base, uint64_t limit, const std::string& prefix, TarListing& out) {
    std::string long_name;
    PaxValues pax;
    char block[kBlock];
    for (uint64_t pos = base; pos < base + limit;) {
      // An archive may end right after its last entry (some writers omit the end
      // marker), but not inside a header.
      if (pos + kBlock > base + limit)
        return Bad(pos, "the archive ends in the middle of a header");
      if (Status s = ReadBlock(pos, block); !s) return s;
      if (AllZero(block)) return Ok{};
      if (!ChecksumOk(block)) return Bad(pos, "bad header checksum: not a tar archive, or damaged");
      uint64_t size = 0;
      if (!ParseNumber(block + 124, 12, &size)) {
        return Bad(pos, "the size field is not a valid number");
      }
      if (pax.has_size) size = pax.size;
      const uint64_t data = pos + kBlock;
      if (size > base + limit - data) return Bad(pos, "an entry runs past the end of the archive");
      const char type = block[156];
      pos = data + RoundUp(size);
      if (type == 'L' || type == 'x') {
        auto text = ReadText(data, size);
        if (!text) return text.error();
        if (type == 'L') long_name = text->substr(0, text->find('\0'));
        if (type == 'x') {
          if (std::string why = ParsePax(*text, &pax); !why.empty()) return Bad(data - kBlock, why);
        }
        continue;
      }
      std::string name = !pax.path.empty()    ? pax.path
                         : !long_name.empty() ? long_name
                                              : HeaderName(block);
      long_name.clear();
      pax = PaxValues{};
      if (type == 'g' || type == 'K' || type == 'V' || type == '5') continue;
      if (type == 'S' || type == 'M') {
        return Bad(data - kBlock, fmt::format("'{}' is a GNU sparse or multi-volume entry, whose "
                                              "bytes are not contiguous; re-create the archive "
                                              "without --sparse",
                                              name));
      }
      if (type == '1') {
        if (Status s = AddLink(name, Field(block, 157, 100), prefix, out, data); !s) return s;
        continue;
      }
      if (type != '0' && type != '\0' && type != '7') {
        ++out.skipped;
        continue;
      }
      auto path = Normalize(name, data);
      if (!path) return path.error();
      out.entries.push_back(TarEntry{prefix + *path, data, size});
    }
    return Ok{};
  }

  Status ReadBlock(uint64_t pos, char* block) {
    auto n = reader_.ReadAt(pos, kBlock, block);
    if (!n) return n.error();
    if (*n == kBlock) return Ok{};
    return Bad(pos, "the archive ends in the middle of a header");
  }

 private:
  std::string HeaderName(const char* block) const {
    const std::string name(Field(block, 0, 100));
    const bool ustar = std::memcmp(block + 257,
                                   "ustar\0"
                                   "00",
                                   8) == 0;
    const std::string prefix(Field(block, 345, 155));
    return ustar && !prefix.empty() ? prefix + "/" + name : name;
  }

  Result<std::string> ReadText(uint64_t pos, uint64_t size) {
    if (size > (16u << 20)) return Bad(pos, "an extended header is implausibly large");
    std::string text(size, '\0');
    auto n = reader_.ReadAt(pos, size, text.data());
    if (!n) return n.error();
    if (*n != size) return Bad(pos, "the archive ends inside a header");
    return text;
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

  // A hard link names bytes already in the archive: the target's.
  Status AddLink(const std::string& name, std::string_view target, const std::string& prefix,
                 TarListing& out, uint64_t pos) {
    auto path = Normalize(name, pos);
    auto to = Normalize(target, pos);
    if (!path) return path.error();
    if (!to) return to.error();
    for (auto it = out.entries.rbegin(); it != out.entries.rend(); ++it) {
      if (it->path == prefix + *to) {
        out.entries.push_back(TarEntry{prefix + *path, it->offset, it->size});
        return Ok{};
      }
    }
    return Bad(pos, fmt::format("hard link '{}' points to '{}', which is not earlier in the "
                                "archive",
                                name, target));
  }

  Error Bad(uint64_t pos, std::string_view why) const {
    return Error{EINVAL, fmt::format("cannot read {}: at byte {}: {}", label_, pos, why)};
  }

  RangeReader& reader_;
  std::string label_;
};

// Keeps the last entry of each path, as extracting the archive would.
void DropReplaced(std::vector<TarEntry>& entries) {
  std::unordered_map<std::string_view, size_t> last;
  for (size_t i = 0; i < entries.size(); ++i) last[entries[i].path] = i;
  if (last.size() == entries.size()) return;
  std::vector<TarEntry> kept;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (last[entries[i].path] == i) kept.push_back(entries[i]);
  }
  entries = std::move(kept);
}

bool AllInnerTars(const std::vector<TarEntry>& entries) {
  return !entries.empty() && std::all_of(entries.begin(), entries.end(), [](const TarEntry& e) {
    return e.path.size() > 4 && e.path.ends_with(".tar");
  });
}

// Lists each inner archive of `outer` into its own listing, `parallel` walks at once
// (each with a reader of its own), and appends them in archive order.
Status ListInnerTars(RangeReader& reader, const ReaderFactory& more, unsigned parallel,
                     const TarListing& outer, TarListing& inner) {
  const std::vector<TarEntry>& tars = outer.entries;
  std::vector<TarListing> parts(tars.size());
  std::vector<Status> results(tars.size(), Ok{});
  std::atomic<size_t> next{0};
  auto walk_some = [&](RangeReader& r) {
    TarWalker walker(r);
    for (size_t i = next++; i < tars.size(); i = next++) {
      const std::string folder = tars[i].path.substr(0, tars[i].path.size() - 4) + "/";
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
    std::move(parts[i].entries.begin(), parts[i].entries.end(), std::back_inserter(inner.entries));
  }
  return Ok{};
}

}  // namespace

Result<TarListing> ListTar(RangeReader& reader, const ReaderFactory& more, unsigned parallel) {
  TarWalker walker(reader);
  TarListing outer;
  Status s = walker.Walk(0, reader.size(), "", outer);
  DropReplaced(outer.entries);
  if (s && AllInnerTars(outer.entries)) {
    TarListing inner;
    inner.nested = true;
    inner.skipped = outer.skipped;
    s = ListInnerTars(reader, more, parallel, outer, inner);
    DropReplaced(inner.entries);
    outer = std::move(inner);
  }
  if (!s) return s.error();
  return outer;
}

Result<TarListing> ListTar(const std::filesystem::path& path) {
  auto reader = OpenFileReader(path);
  if (!reader) return reader.error();
  return ListTar(**reader);
}

bool LooksLikeTar(RangeReader& reader) {
  char block[kBlock];
  auto n = reader.ReadAt(0, kBlock, block);
  return n && *n == kBlock && !AllZero(block) && ChecksumOk(block);
}

bool LooksLikeTar(const std::filesystem::path& path) {
  auto reader = OpenFileReader(path);
  return reader && LooksLikeTar(**reader);
}

}  // namespace gpufs
