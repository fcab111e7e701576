#include "cli/stat/stat_report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/sizes.h"
#include "dataset/printable.h"

namespace gpufs {
namespace {

constexpr size_t kChartWidth = 60;

double Percent(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

// "KernelPageCache" style keys for -o kv, from the tier's words.
std::string KvName(const std::string& tier) {
  for (const TierName& name : kTierNames) {
    if (tier == name.label) return name.key;
  }
  return "Gpu";
}

std::string JsonName(const std::string& tier) {
  std::string name = KvName(tier);
  name[0] = static_cast<char>(std::tolower(name[0]));
  return name;
}

void PrintText(const StatReport& r, GroupBy by, std::FILE* out) {
  for (const FileStat& file : r.listed) {
    fmt::print(out, "{}\n", Printable(file.path));
    for (size_t t = 0; t < r.tiers.size(); ++t) {
      fmt::print(out, "[{}] {}/{}  {}\n", ResidencyChart(file.charts[t]), file.resident[t],
                 file.pages, r.tiers[t]);
    }
  }
  if (!r.listed.empty()) fmt::print(out, "\n");
  fmt::print(out, "{:>16}: {}\n", "Files", r.files);
  fmt::print(out, "{:>16}: {}\n", "Directories", r.dirs);
  const std::string total_size = PrettySize(r.pages * kStatPageSize);
  for (size_t t = 0; t < r.tiers.size(); ++t) {
    const std::string figures = fmt::format("{}/{}  {}/{}  {:.3g}%", r.resident[t], r.pages,
                                            PrettySize(r.resident[t] * kStatPageSize), total_size,
                                            Percent(r.resident[t], r.pages));
    fmt::print(out, "{:>16}: {:<32} {}\n", "Resident Pages", figures, r.tiers[t]);
  }
  fmt::print(out, "{:>16}: {:.5g} seconds\n", "Elapsed", r.elapsed_s);
  if (r.buckets.empty()) return;
  fmt::print(out, "\n{:<24} {:>9} {:>12}", by == GroupBy::kClass ? "CLASS" : "GROUP", "FILES",
             "PAGES");
  for (const std::string& tier : r.tiers) fmt::print(out, " {:>8}", KvName(tier));
  fmt::print(out, "\n");
  for (const BucketStat& b : r.buckets) {
    fmt::print(out, "{:<24} {:>9} {:>12}", Printable(b.name), b.files, b.pages);
    for (size_t t = 0; t < r.tiers.size(); ++t) {
      fmt::print(out, " {:>7.3g}%", Percent(b.resident[t], b.pages));
    }
    fmt::print(out, "\n");
  }
}

std::string KvTiers(const std::vector<std::string>& tiers, const std::vector<uint64_t>& resident,
                    uint64_t pages) {
  std::string out;
  for (size_t t = 0; t < tiers.size(); ++t) {
    const std::string k = KvName(tiers[t]);
    out += fmt::format(" {0}ResidentPages={1} {0}ResidentSize={2} {0}ResidentPercent={3:.3g}", k,
                       resident[t], resident[t] * kStatPageSize, Percent(resident[t], pages));
  }
  return out;
}

void PrintKv(const StatReport& r, GroupBy by, std::FILE* out) {
  for (const FileStat& f : r.listed) {
    fmt::print(out, "File={} TotalPages={}{}\n", KvValue(f.path), f.pages,
               KvTiers(r.tiers, f.resident, f.pages));
  }
  for (const BucketStat& b : r.buckets) {
    fmt::print(out, "{}={} Files={} TotalPages={}{}\n", by == GroupBy::kClass ? "Class" : "Group",
               KvValue(b.name), b.files, b.pages, KvTiers(r.tiers, b.resident, b.pages));
  }
  fmt::print(out, "Files={} Directories={} TotalPages={} TotalSize={}{} Elapsed={:.5g}\n", r.files,
             r.dirs, r.pages, r.pages * kStatPageSize, KvTiers(r.tiers, r.resident, r.pages),
             r.elapsed_s);
}

nlohmann::json JsonTiers(const std::vector<std::string>& tiers,
                         const std::vector<uint64_t>& resident, uint64_t pages) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t t = 0; t < tiers.size(); ++t) {
    j[JsonName(tiers[t])] = {{"resident_pages", resident[t]},
                             {"resident_bytes", resident[t] * kStatPageSize},
                             {"percent", Percent(resident[t], pages)}};
  }
  return j;
}

void PrintJson(const StatReport& r, GroupBy by, std::FILE* out) {
  nlohmann::json j{{"files", r.files},
                   {"directories", r.dirs},
                   {"page_size", kStatPageSize},
                   {"total_pages", r.pages},
                   {"total_bytes", r.pages * kStatPageSize},
                   {"tiers", JsonTiers(r.tiers, r.resident, r.pages)},
                   {"elapsed_s", r.elapsed_s}};
  if (!r.buckets.empty()) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const BucketStat& b : r.buckets) {
      buckets.push_back({{"name", b.name},
                         {"files", b.files},
                         {"total_pages", b.pages},
                         {"tiers", JsonTiers(r.tiers, b.resident, b.pages)}});
    }
    j[by == GroupBy::kClass ? "classes" : "groups"] = std::move(buckets);
  }
  if (!r.listed.empty()) {
    nlohmann::json files = nlohmann::json::array();
    for (const FileStat& f : r.listed) {
      nlohmann::json file{{"path", f.path},
                          {"total_pages", f.pages},
                          {"tiers", JsonTiers(r.tiers, f.resident, f.pages)}};
      for (size_t t = 0; t < r.tiers.size(); ++t) {
        file["tiers"][JsonName(r.tiers[t])]["chart"] = ResidencyChart(f.charts[t]);
      }
      files.push_back(std::move(file));
    }
    j["file_list"] = std::move(files);
  }
  // A name that is not UTF-8 cannot be JSON: its bytes are replaced (U+FFFD), not refused.
  fmt::print(out, "{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

std::string ResidencyChart(const std::vector<bool>& pages) {
  const size_t per_column = pages.size() <= kChartWidth ? 1 : pages.size() / kChartWidth + 1;
  std::string chart;
  for (size_t start = 0; start < pages.size(); start += per_column) {
    const size_t end = std::min(pages.size(), start + per_column);
    size_t resident = 0;
    for (size_t p = start; p < end; ++p) resident += pages[p];
    chart += resident == end - start ? 'O' : resident == 0 ? ' ' : 'o';
  }
  return chart;
}

std::string PrettySize(uint64_t bytes) {
  return FormatSize(bytes, {.largest = SizeScale::kTera,
                            .rounding = SizeStyle::kDown,
                            .letters = true,
                            .separator = ""});
}

void PrintReport(const StatReport& report, StatFormat format, GroupBy by, std::FILE* out) {
  switch (format) {
    case StatFormat::kText:
      return PrintText(report, by, out);
    case StatFormat::kKv:
      return PrintKv(report, by, out);
    case StatFormat::kJson:
      return PrintJson(report, by, out);
  }
}

}  // namespace gpufs
