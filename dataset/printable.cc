#include "dataset/printable.h"

#include <fmt/format.h>

#include <cstdint>

namespace gpufs {
namespace {

// The length of the valid UTF-8 sequence at the start of `s` and its code point, or 0 when
// the bytes there are not one (a stray continuation byte, a truncated or overlong sequence,
// a surrogate, a code point past U+10FFFF).
size_t Utf8Sequence(std::string_view s, char32_t& code) {
  const auto lead = static_cast<unsigned char>(s[0]);
  size_t length = 0;
  char32_t min = 0;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, code = lead & 0x1f, min = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, code = lead & 0x0f, min = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, code = lead & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    const auto next = static_cast<unsigned char>(s[i]);
    if ((next & 0xc0) != 0x80) return 0;
    code = (code << 6) | (next & 0x3f);
  }
  if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  return length;
}

// C1 controls act on terminals as ESC sequences do; the bidirectional marks and overrides
// make a terminal show a name's characters in another order than they are.
bool Hidden(char32_t code) {
  return (code >= 0x80 && code <= 0x9f) || code == 0x61c || code == 0x200e || code == 0x200f ||
         (code >= 0x202a && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069);
}

void Escape(std::string_view bytes, std::string& out) {
  for (char c : bytes)
    fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<uint8_t>(c));
}

std::string Escaped(std::string_view text, bool keep_backslash) {
  std::string out;
  out.reserve(text.size());
  for (size_t at = 0; at < text.size();) {
    const auto u = static_cast<unsigned char>(text[at]);
    if (u >= 0x20 && u < 0x7f && (u != '\\' || keep_backslash)) {
      out += text[at++];
      continue;
    }
    char32_t code = 0;
    const size_t length = u >= 0x80 ? Utf8Sequence(text.substr(at), code) : 0;
    if (length == 0) {
      Escape(text.substr(at, 1), out);
      ++at;
    } else {
      const std::string_view sequence = text.substr(at, length);
      if (Hidden(code)) {
        Escape(sequence, out);
      } else {
        out += sequence;
      }
      at += length;
    }
  }
  return out;
}

}  // namespace

std::string Printable(std::string_view text) { return Escaped(text, false); }

std::string PrintableLine(std::string_view text) { return Escaped(text, true); }

std::string KvValue(std::string_view text) {
  std::string printable = Printable(text);
  if (!printable.empty() && printable.find_first_of(" =\"") == std::string::npos) return printable;
  std::string quoted = "\"";
  for (char c : printable) {
    if (c == '"') quoted += '\\';
    quoted += c;
  }
  return quoted + '"';
}

}  // namespace gpufs
