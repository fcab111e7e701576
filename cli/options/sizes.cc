#include "cli/options/sizes.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

namespace gpufs {
namespace {

struct Unit {
  std::string_view name;
  double bytes;
};

constexpr std::array<Unit, 9> kUnits{{{"B", 1},
                                      {"KiB", 1024.0},
                                      {"MiB", 1048576.0},
                                      {"GiB", 1073741824.0},
                                      {"TiB", 1099511627776.0},
                                      {"kB", 1e3},
                                      {"MB", 1e6},
                                      {"GB", 1e9},
                                      {"TB", 1e12}}};

bool SameIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// The unit `suffix` names: IEC ones in any case ("gib"), SI ones as written or upper case.
const Unit* FindUnit(std::string_view suffix) {
  for (const Unit& unit : kUnits) {
    const bool iec = unit.name.size() == 3;
    if (iec ? SameIgnoringCase(unit.name, suffix) : unit.name == suffix) return &unit;
  }
  return nullptr;
}

}  // namespace

Result<uint64_t> ParseSize(std::string_view text, uint64_t least_bare) {
  double number = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || number < 0 || text.empty() || text[0] == '-') {
    return Fail(EINVAL, "'{}' is not a size; write e.g. 8GiB, 500MB or 65536", text);
  }
  const std::string_view suffix(end, text.data() + text.size() - end);
  const std::string_view digits = text.substr(0, text.size() - suffix.size());
  const bool lone =
      suffix.size() == 1 && std::string_view("kKmMgGtT").find(suffix[0]) != std::string_view::npos;
  if (lone || suffix == "KB") {
    const char u = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])));
    return Fail(EINVAL, "'{}' could mean either; write {}{}iB (powers of 2) or {}{}B (of 10)", text,
                digits, u == 'K' ? 'K' : u, digits, u == 'K' ? 'k' : u);
  }
  const Unit* unit = suffix.empty() ? &kUnits[0] : FindUnit(suffix);
  if (unit == nullptr) {
    return Fail(EINVAL, "'{}' has no unit gpufs knows; use B, KiB, MiB, GiB, TiB, kB, MB, GB or TB",
                text);
  }
  const double bytes = std::round(number * unit->bytes);
  if (bytes > 1.8e19) return Fail(EINVAL, "'{}' is more than any machine holds", text);
  if (suffix.empty() && bytes != 0 && bytes < static_cast<double>(least_bare)) {
    return Fail(EINVAL,
                "'{}' is {} bytes, too few to be meant; write the unit, e.g. {}GiB or {}MiB", text,
                text, text, text);
  }
  return static_cast<uint64_t>(bytes);
}

CLI::Validator SizeValue(uint64_t least_bare) {
  return CLI::Validator(
      [least_bare](std::string& value) -> std::string {
        Result<uint64_t> bytes = ParseSize(value, least_bare);
        if (!bytes.ok()) return bytes.error().message;
        value = std::to_string(*bytes);
        return {};
      },
      "SIZE");
}

}  // namespace gpufs
