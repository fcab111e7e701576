// The members of each blob with their SHA-256, from the catalog: what bytes from a peer
// cache are checked against before anyone sees them.
//
// A peer (--peers) is another node's caching proxy, and a compromised one could send any
// bytes with the right headers: the ETag and Content-Range it writes prove nothing. The
// digests came from the store (the pack's index), so a peer can delay bytes but never
// change them. A peer is therefore asked only for ranges made of whole members (and the
// bytes between them, tar headers or padding, which are never served): the reader reads
// the members that stick out of its range whole, and once every block of a read is in,
// every member is hashed before the read is done.
//
// Immutable after construction: thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "dataset/catalog.h"

namespace gpufs {

class MemberDigests {
 public:
  // Refused when the catalog has no SHA-256 digests, or when two members of a blob share
  // bytes (no pack does; a range could not then be cut into whole members).
  static Result<std::shared_ptr<const MemberDigests>> FromCatalog(const Catalog& catalog);

  // [from, to) grown to the smallest range that holds it and cuts no member.
  std::pair<uint64_t, uint64_t> Widen(uint32_t blob, uint64_t from, uint64_t to) const;
  // The bounds of the member that `at` falls strictly inside (it starts before `at` and
  // ends after it), if any.
  std::optional<std::pair<uint64_t, uint64_t>> Straddling(uint32_t blob, uint64_t at) const;
  // Whether [from, to) cuts no member.
  bool WholeMembers(uint32_t blob, uint64_t from, uint64_t to) const {
    return Widen(blob, from, to) == std::pair{from, to};
  }

  // A member whose bytes did not match: where it lies in its blob, its file record and
  // its path.
  struct Mismatch {
    uint64_t offset = 0;
    uint64_t size = 0;
    uint32_t file = 0;
    std::string path;
  };
  // Hashes every member lying wholly in the `length` bytes at `bytes`, which are the
  // blob's from `offset`; those that do not match their digests.
  std::vector<Mismatch> Mismatches(uint32_t blob, uint64_t offset, const char* bytes,
                                   size_t length) const;
  const Sha256Digest* Digest(uint32_t file) const { return catalog_.Sha256(file); }

 private:
  struct Member {
    uint64_t offset = 0;
    uint64_t end = 0;
    uint32_t file = 0;  // index into the catalog's file table
  };
  MemberDigests(Catalog catalog, std::vector<std::vector<Member>> by_blob);
  const std::vector<Member>& MembersOf(uint32_t blob) const;

  std::string PathOfFile(uint32_t file) const;

  const Catalog catalog_;                           // holds the digests
  const std::vector<std::vector<Member>> by_blob_;  // each sorted by offset, none empty
};

}  // namespace gpufs
