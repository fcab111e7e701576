#include "source/device_shape.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "source/cgroup_limits.h"
#include "source/network_fs.h"

namespace gpufs {
namespace {

constexpr uint64_t kTmpfsMagic = 0x01021994;  // linux/magic.h
constexpr uint64_t kRamfsMagic = 0x858458f6;
// Without a throttle to read: a seek and a rotation (~8 ms) at ~150 MB/s for a spinning
// disk; a solid-state device or a virtual disk answers a request in the time of ~64 KiB;
// a network filesystem's request is a round trip (~1 ms) at ~1 GB/s.
constexpr double kRotationalBreakEven = 1 << 20;
constexpr double kSolidBreakEven = 64 << 10;
constexpr double kNetworkBreakEven = 1 << 20;

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::optional<double> ThrottleBreakEven(const std::string& device, std::string* why) {
  const auto v1 = CgroupChain("blkio");
  const auto v2 = CgroupChain("");
  const auto knob = [&](const char* name) {
    return LeastLimit(v1, [&](const auto& f) {
      return ThrottleOf(ReadAll(f / (std::string("blkio.throttle.") + name)), device);
    });
  };
  const auto io_max = [&](const char* key) {
    return LeastLimit(v2,
                      [&](const auto& f) { return IoMaxOf(ReadAll(f / "io.max"), device, key); });
  };
  auto iops = knob("read_iops_device"), bps = knob("read_bps_device");
  if (!iops || !bps) iops = io_max("riops"), bps = io_max("rbps");
  const auto even = ThrottledBreakEven(iops, bps);
  if (even) *why = fmt::format("throttled to {} reads/s and {} MB/s", *iops, *bps / 1000000);
  return even;
}

}  // namespace

std::optional<uint64_t> DeviceQueueValue(const std::filesystem::path& file, std::string_view knob) {
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) return std::nullopt;
  const std::filesystem::path dev = std::filesystem::path("/sys/dev/block") /
                                    fmt::format("{}:{}", major(st.st_dev), minor(st.st_dev));
  // A partition has no queue of its own; its disk's is one folder up.
  if (auto value = ReadNumber(dev / "queue" / knob)) return value;
  return ReadNumber(dev / ".." / "queue" / knob);
}

std::optional<uint64_t> ThrottleOf(std::string_view knob, std::string_view device) {
  std::istringstream lines{std::string(knob)};
  std::string dev;
  uint64_t value = 0;
  while (lines >> dev >> value) {
    if (dev == device) return value;
  }
  return std::nullopt;
}

std::optional<uint64_t> IoMaxOf(std::string_view io_max, std::string_view device,
                                std::string_view key) {
  std::istringstream lines{std::string(io_max)};
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string word;
    if (!(words >> word) || word != device) continue;
    while (words >> word) {
      if (!word.starts_with(key) || word.size() <= key.size() || word[key.size()] != '=') continue;
      const std::string value = word.substr(key.size() + 1);
      if (value == "max" || value.empty()) return std::nullopt;
      return std::stoull(value);
    }
  }
  return std::nullopt;
}

std::optional<double> ThrottledBreakEven(std::optional<uint64_t> iops,
                                         std::optional<uint64_t> bps) {
  if (!iops || !bps || *iops == 0) return std::nullopt;
  return static_cast<double>(*bps) / static_cast<double>(*iops);
}

DeviceShape ShapeOf(const std::filesystem::path& file) {
  const auto type = FilesystemTypeOf(file);
  if (type && (*type == kTmpfsMagic || *type == kRamfsMagic)) {
    return {DeviceShape::Kind::kMemory, 0, "in memory (tmpfs)"};
  }
  if (const auto network = type ? NetworkFilesystemName(*type) : std::nullopt) {
    return {DeviceShape::Kind::kNetwork, kNetworkBreakEven,
            fmt::format("on {}, a network filesystem", *network)};
  }
  struct stat st {};
  if (stat(file.c_str(), &st) != 0) return {DeviceShape::Kind::kBlock, kSolidBreakEven, "unknown"};
  const std::string device = fmt::format("{}:{}", major(st.st_dev), minor(st.st_dev));
  std::string why;
  if (const auto even = ThrottleBreakEven(device, &why)) {
    return {DeviceShape::Kind::kBlock, *even, why};
  }
  if (DeviceQueueValue(file, "rotational").value_or(0) != 0) {
    return {DeviceShape::Kind::kBlock, kRotationalBreakEven, "a rotational disk"};
  }
  return {DeviceShape::Kind::kBlock, kSolidBreakEven, "a solid-state or virtual disk"};
}

}  // namespace gpufs
