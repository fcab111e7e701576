// /metrics: the stats in Prometheus' text exposition format, written from the components'
// tables of figures (source/figure.h) and nothing else, so that a figure added to a table
// is exported, and listed by MetricsListing, without a line here.
#pragma once

#include <string>

#include "fs/filesystem.h"

namespace gpufs {

// The stats of `fs` (StatsOf) as metrics.
std::string MetricsText(const Filesystem& fs);

// Every series /metrics may export, one Markdown table row each: name, type, labels, help.
std::string MetricsListing();

}  // namespace gpufs
