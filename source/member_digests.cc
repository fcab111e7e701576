#include "source/member_digests.h"

#include <algorithm>

#include "dataset/format/checksums.h"

namespace gpufs {

Result<std::shared_ptr<const MemberDigests>> MemberDigests::FromCatalog(const Catalog& catalog) {
  if (!catalog.has_sha256()) {
    return Fail(EINVAL, "its index has no SHA-256 of each file");
  }
  std::vector<std::vector<Member>> by_blob(catalog.blobs().size());
  for (uint32_t i = 0; i < catalog.file_count(); ++i) {
    const FileExtent f = catalog.ExtentAt(i);
    if (f.size == 0) continue;  // no bytes to check
    by_blob[catalog.Group(f.group).blob].push_back(Member{f.offset, f.offset + f.size, i});
  }
  for (auto& members : by_blob) {
    std::sort(members.begin(), members.end(),
              [](const Member& a, const Member& b) { return a.offset < b.offset; });
    for (size_t m = 1; m < members.size(); ++m) {
      if (members[m].offset < members[m - 1].end) {
        return Fail(EINVAL, "two of its files share bytes ({} and {})", members[m - 1].offset,
                    members[m].offset);
      }
    }
  }
  return std::shared_ptr<const MemberDigests>(new MemberDigests(catalog, std::move(by_blob)));
}

MemberDigests::MemberDigests(Catalog catalog, std::vector<std::vector<Member>> by_blob)
    : catalog_(std::move(catalog)), by_blob_(std::move(by_blob)) {}

const std::vector<MemberDigests::Member>& MemberDigests::MembersOf(uint32_t blob) const {
  static const std::vector<Member> kNone;
  return blob < by_blob_.size() ? by_blob_[blob] : kNone;
}

std::pair<uint64_t, uint64_t> MemberDigests::Widen(uint32_t blob, uint64_t from,
                                                   uint64_t to) const {
  const auto& members = MembersOf(blob);
  // Members do not overlap, so their ends are sorted like their offsets.
  auto first = std::upper_bound(members.begin(), members.end(), from,
                                [](uint64_t at, const Member& m) { return at < m.end; });
  if (first != members.end() && first->offset < from) from = first->offset;
  auto after = std::lower_bound(members.begin(), members.end(), to,
                                [](const Member& m, uint64_t at) { return m.offset < at; });
  if (after != members.begin() && std::prev(after)->end > to) to = std::prev(after)->end;
  return {from, to};
}

std::vector<MemberDigests::Mismatch> MemberDigests::Mismatches(uint32_t blob, uint64_t offset,
                                                               const char* bytes,
                                                               size_t length) const {
  const auto& members = MembersOf(blob);
  const uint64_t end = offset + length;
  std::vector<Mismatch> bad;
  auto m = std::lower_bound(members.begin(), members.end(), offset,
                            [](const Member& member, uint64_t at) { return member.offset < at; });
  for (; m != members.end() && m->end <= end; ++m) {
    const Sha256Digest got = Sha256Of(bytes + (m->offset - offset), m->end - m->offset);
    if (got != *catalog_.Sha256(m->file)) {
      bad.push_back(Mismatch{m->offset, m->end - m->offset, m->file, PathOfFile(m->file)});
    }
  }
  return bad;
}

std::optional<std::pair<uint64_t, uint64_t>> MemberDigests::Straddling(uint32_t blob,
                                                                       uint64_t at) const {
  const auto& members = MembersOf(blob);
  auto holder = std::upper_bound(members.begin(), members.end(), at,
                                 [](uint64_t a, const Member& m) { return a < m.end; });
  if (holder == members.end() || holder->offset >= at) return std::nullopt;
  return std::pair{holder->offset, holder->end};
}

std::string MemberDigests::PathOfFile(uint32_t file) const {
  if (file >= catalog_.file_count()) return "(a file)";
  return catalog_.PathOf(catalog_.FileNode(file));
}

}  // namespace gpufs
