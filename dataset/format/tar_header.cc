#include "dataset/format/tar_header.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "dataset/format/name_rules.h"

namespace gpufs {
namespace {

std::string_view Field(const char* block, size_t offset, size_t size) {
  std::string_view field(block + offset, size);
  return field.substr(0, field.find('\0'));
}

// A decimal number of a pax record: digits only, no sign, no overflow.
bool ParseDecimal(std::string_view text, uint64_t* out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size();
}

// Applies one record's key and value; empty when the value is acceptable.
std::string ApplyPaxRecord(std::string_view key, std::string_view value, PaxValues* pax) {
  if (key == "path") pax->path = value;
  if (key == "linkpath") pax->linkpath = value;
  if (key == "size") {
    uint64_t size = 0;
    if (!ParseDecimal(value, &size)) {
      return fmt::format("pax size '{}' is not a number that fits 64 bits", Printable(value));
    }
    pax->size = size;
  }
  if (key.starts_with("GNU.sparse.")) pax->sparse = true;
  if (key == "GNU.sparse.name") pax->sparse_name = value;
  return {};
}

}  // namespace

bool ParseTarNumber(const char* p, size_t size, uint64_t* out) {
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

bool TarChecksumOk(const char* block) {
  uint64_t stored = 0;
  if (!ParseTarNumber(block + 148, 8, &stored)) return false;
  // The checksum field counts as eight spaces. Whole-block loops, then the field taken
  // back out: every header of a 1.28 M-file archive goes through here.
  // The signed sum only when the unsigned one fails, as it rarely does.
  uint64_t unsigned_sum = 8 * ' ';
  for (size_t i = 0; i < kTarBlock; ++i) unsigned_sum += static_cast<unsigned char>(block[i]);
  for (size_t i = 148; i < 156; ++i) unsigned_sum -= static_cast<unsigned char>(block[i]);
  if (stored == unsigned_sum) return true;
  int64_t signed_sum = 8 * ' ';
  for (size_t i = 0; i < kTarBlock; ++i) signed_sum += static_cast<signed char>(block[i]);
  for (size_t i = 148; i < 156; ++i) signed_sum -= static_cast<signed char>(block[i]);
  return signed_sum >= 0 && stored == static_cast<uint64_t>(signed_sum);
}

bool AllZeroBlock(const char* block) {
  return std::all_of(block, block + kTarBlock, [](char c) { return c == 0; });
}

std::string TarHeaderName(const char* block) {
  const std::string name(Field(block, 0, 100));
  const bool ustar = std::memcmp(block + 257,
                                 "ustar\0"
                                 "00",
                                 8) == 0;
  const std::string prefix(Field(block, 345, 155));
  return ustar && !prefix.empty() ? prefix + "/" + name : name;
}

std::string TarHeaderLinkName(const char* block) { return std::string(Field(block, 157, 100)); }

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
    std::string why = ApplyPaxRecord(record.substr(0, eq), record.substr(eq + 1), pax);
    if (!why.empty()) return why;
  }
  return {};
}

std::string_view GlobalPaxConflict(const PaxValues& pax) {
  if (!pax.path.empty()) return "path";
  if (!pax.linkpath.empty()) return "linkpath";
  if (pax.size) return "size";
  if (pax.sparse) return "GNU.sparse";
  return {};
}

TarKind KindOf(char type, std::string_view name) {
  switch (type) {
    case 'L':
      return TarKind::kLongName;
    case 'K':
      return TarKind::kLongLink;
    case 'x':
    case 'X':
      return TarKind::kExtended;
    case 'g':
      return TarKind::kGlobal;
    case '0':
    case '\0':
    case '7':
      return name.ends_with('/') ? TarKind::kFolder : TarKind::kFile;
    case '1':
      return TarKind::kHardLink;
    case '2':
    case '3':
    case '4':
    case '6':
      return TarKind::kNoBytes;
    case '5':
    case 'D':
      return TarKind::kFolder;
    case 'V':
      return TarKind::kLabel;
    case 'S':
      return TarKind::kSparse;
    case 'M':
      return TarKind::kContinued;
    default:
      return TarKind::kFile;  // GNU tar: "Unknown file type, extracted as normal file"
  }
}

bool TypeHasData(char type) { return type < '1' || type > '6'; }

}  // namespace gpufs
