// A figure a component reports, spelled once. Each component keeps the keys of its Stats()
// (what user.gpufs.stats, the control socket and gpufs-stat read) as constants in a
// namespace of its own (source_stat, cache_stat, tier_stat, ...), and beside them a table
// of the Figures it exports: the key, the Prometheus series gpufs_<metric>, its type and
// its help. fs/metrics.cc writes /metrics from these tables alone, and `gpufsd metrics`
// lists them for the docs; a new figure is one constant and one row.
#pragma once

#include <span>

namespace gpufs {

enum class FigureKind { kCounter, kGauge };

struct Figure {
  const char* key;     // in the component's Stats()
  const char* metric;  // after "gpufs_"; a counter's ends in "_total"
  FigureKind kind;
  const char* help;
};

using Figures = std::span<const Figure>;

inline constexpr FigureKind kCounter = FigureKind::kCounter;
inline constexpr FigureKind kGauge = FigureKind::kGauge;

}  // namespace gpufs
