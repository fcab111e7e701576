// gpufs-stat's output: vmtouch's summary and residency charts with a line per tier, a
// key=value line for scripts, or JSON.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "cli/stat/stat_scan.h"

namespace gpufs {

enum class StatFormat { kText, kKv, kJson };

// vmtouch's chart: 60 columns at most, each 'O' (all its pages resident), 'o' (some) or
// ' ' (none); a file of fewer pages gets a column per page.
std::string ResidencyChart(const std::vector<bool>& pages);
// vmtouch's sizes: whole units, rounded down: 4K, 375M, 1G.
std::string PrettySize(uint64_t bytes);

void PrintReport(const StatReport& report, StatFormat format, GroupBy by, std::FILE* out);

}  // namespace gpufs
