#include "source/network_fs.h"

#include <sys/statfs.h>

#include <array>
#include <utility>

namespace gpufs {

std::optional<std::string_view> NetworkFilesystemName(uint64_t f_type) {
  // From linux/magic.h and each filesystem's own sources.
  static constexpr std::array<std::pair<uint64_t, std::string_view>, 13> kNetwork{{
      {0x6969, "NFS"},
      {0x0BD00BD0, "Lustre"},
      {0xFF534D42, "CIFS"},
      {0xFE534D42, "SMB2"},
      {0x517B, "SMB"},
      {0x47504653, "GPFS"},
      {0x00C36400, "CephFS"},
      {kFuseMagic, "FUSE"},
      {0x19830326, "BeeGFS"},
      {0x5346414F, "AFS"},
      {0x01021997, "9P"},
      {0x20030528, "OrangeFS"},
      {0xAAD7AAEA, "PanFS"},
  }};
  for (const auto& [magic, name] : kNetwork) {
    if (magic == f_type) return name;
  }
  return std::nullopt;
}

bool SlowerThanLocalDisk(uint64_t f_type) {
  return f_type != kFuseMagic && NetworkFilesystemName(f_type).has_value();
}

std::optional<uint64_t> FilesystemTypeOf(const std::filesystem::path& path) {
  for (std::filesystem::path at = path; !at.empty(); at = at.parent_path()) {
    struct statfs st {};
    if (statfs(at.c_str(), &st) == 0)
      return static_cast<uint64_t>(st.f_type) & 0xFFFFFFFF;  // a 32-bit magic
    if (at == at.parent_path()) break;
  }
  return std::nullopt;
}

}  // namespace gpufs
