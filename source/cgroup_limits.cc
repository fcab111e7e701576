#include "source/cgroup_limits.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <string>

namespace gpufs {
namespace {

// cgroup v1 writes "no limit" as the largest page-aligned signed 64-bit number.
constexpr uint64_t kUnlimited = uint64_t{1} << 62;

// Where a hierarchy is mounted: v1 controllers under /sys/fs/cgroup/NAME; v2 at
// /sys/fs/cgroup itself, or /sys/fs/cgroup/unified beside v1 ones.
std::filesystem::path HierarchyRoot(std::string_view controller) {
  const std::filesystem::path base = "/sys/fs/cgroup";
  if (!controller.empty()) return base / std::string(controller);
  if (std::filesystem::exists(base / "cgroup.controllers")) return base;
  return base / "unified";
}

}  // namespace

std::vector<std::filesystem::path> CgroupChain(std::string_view controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  std::vector<std::filesystem::path> chain;
  while (std::getline(in, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::istringstream names(line.substr(a + 1, b - a - 1));
    bool ours = controller.empty() && b == a + 1;
    for (std::string name; !ours && std::getline(names, name, ',');) ours = name == controller;
    if (!ours) continue;
    const std::filesystem::path root = HierarchyRoot(controller);
    for (std::filesystem::path at = line.substr(b + 1); !at.empty(); at = at.parent_path()) {
      chain.push_back(root / at.relative_path());
      if (at == at.parent_path()) break;
    }
  }
  return chain;
}

std::optional<uint64_t> ReadNumber(const std::filesystem::path& path) {
  std::ifstream in(path);
  uint64_t value = 0;
  if (!(in >> value)) return std::nullopt;
  return value;
}

uint64_t MemoryAvailable() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  while (meminfo >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

std::optional<uint64_t> CgroupMemoryLimit() {
  const auto limit = [](const char* file) {
    return [file](const std::filesystem::path& folder) -> std::optional<uint64_t> {
      const auto value = ReadNumber(folder / file);
      if (value && *value >= kUnlimited) return std::nullopt;
      return value;
    };
  };
  const auto v1 = LeastLimit(CgroupChain("memory"), limit("memory.limit_in_bytes"));
  const auto v2 = LeastLimit(CgroupChain(""), limit("memory.max"));
  if (v1 && v2) return std::min(*v1, *v2);
  return v1 ? v1 : v2;
}

}  // namespace gpufs
