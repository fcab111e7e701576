// The pieces of one tar header block and of the extended headers before it, read as GNU
// tar reads them: what a member is, which of its fields count, and what a pax or GNU long
// name record says of it. The walk over an archive (tar.cc) puts them together.
//
// Extended headers ('L', 'K', 'x') describe the next real member only, a later one of the
// same kind replacing an earlier; a global pax header ('g') is none of those and leaves
// them for it. A regular type whose name ends in '/' is a folder (v7 and BSD tar write
// folders so); a type tar does not know is a regular file, as POSIX says. Links, devices,
// fifos and folders ('1' to '6') carry no data, whatever their size field says.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpufs {

inline constexpr uint64_t kTarBlock = 512;

// Octal, space/NUL padded; or base-256 (GNU) when the top bit of the first byte is set.
// False for anything else: a negative base-256 number, a value past 63 bits, a field with
// no digits or with garbage between them. A lenient reader here is how a damaged header
// turns into a size that wraps the walk back to the archive's start.
bool ParseTarNumber(const char* field, size_t size, uint64_t* out);

// True when the block's checksum field holds the sum of its bytes as unsigned or as signed
// chars (old writers summed signed chars; GNU tar accepts both).
bool TarChecksumOk(const char* block);

bool AllZeroBlock(const char* block);

// The member's name: ustar's prefix and name, or the name alone in older formats.
std::string TarHeaderName(const char* block);
// The 100-byte link target field.
std::string TarHeaderLinkName(const char* block);

// Values of pax records that matter here. Applying records in turn gives each key's last
// value, as tar does.
struct PaxValues {
  std::string path;
  std::string linkpath;
  std::optional<uint64_t> size;
  bool sparse = false;      // any GNU.sparse.* key: the member's data is a sparse map
  std::string sparse_name;  // GNU.sparse.name: the real name of a sparse member
};

// Applies "<length> <key>=<value>\n" records to `pax`; empty when they are well formed,
// else why not.
std::string ParsePax(std::string_view records, PaxValues* pax);

// The first key of `pax` that a global header must not set, or "" when none: tar readers
// disagree on whether a global path or size applies to every later member.
std::string_view GlobalPaxConflict(const PaxValues& pax);

// What one header is, from its type byte and its (final) name.
enum class TarKind {
  kLongName,   // 'L': the next member's name
  kLongLink,   // 'K': the next member's link target
  kExtended,   // 'x' (and Solaris 'X'): pax records of the next member
  kGlobal,     // 'g': pax records of the rest of the archive
  kFile,       // '0', '\0', '7', and any type tar does not know
  kFolder,     // '5', GNU dumpdirs 'D', and a regular type whose name ends in '/'
  kHardLink,   // '1'
  kNoBytes,    // '2', '3', '4', '6': symbolic links, devices and fifos
  kLabel,      // 'V': the volume's label, not a member
  kSparse,     // 'S' (old GNU sparse); pax GNU.sparse.* makes any member one
  kContinued,  // 'M': the rest of a file begun on another volume
};

// What a header of `type` whose member is named `name` is; the name matters only to regular
// types, so the extended headers can be told apart before the name is known.
TarKind KindOf(char type, std::string_view name = {});
// Whether a header of `type` is followed by as many data bytes as its size says.
bool TypeHasData(char type);

}  // namespace gpufs
