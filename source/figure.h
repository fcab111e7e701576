// A figure a component reports, spelled once. Each component keeps the keys of its Stats()
// (what user.gpufs.stats, the control socket and gpufs-stat read) as constants in a
// namespace of its own (source_stat, cache_stat, tier_stat, ...), and beside them a table
// of the Figures it exports: the key, the Prometheus series gpufs_<metric>, its type and
// its help. fs/metrics.cc writes /metrics from these tables alone, and `gpufsd metrics`
// lists them for the docs; a new figure is one constant and one row.
//
// Where a component keeps its counters in a struct, the rows of its counters are
// CounterFigures: each also says how to read its count, so that Stats() fills its JSON from
// the table in one loop (PutCounts) and a counter is spelled in its row alone. A row with no
// metric is in Stats() only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include <nlohmann/json.hpp>

namespace gpufs {

enum class FigureKind { kCounter, kGauge };

struct Figure {
  const char* key;               // in the component's Stats()
  const char* metric = nullptr;  // after "gpufs_"; a counter's ends in "_total"; null: none
  FigureKind kind = FigureKind::kCounter;
  const char* help = nullptr;
};

using Figures = std::span<const Figure>;

inline constexpr FigureKind kCounter = FigureKind::kCounter;
inline constexpr FigureKind kGauge = FigureKind::kGauge;

// A counter's figure and how to read it from `Counters`: &CountOf<&Counters::member>.
template <class Counters>
struct CounterFigure : Figure {
  uint64_t (*count)(const Counters&);
};

// A member that counts (an atomic, a striped counter), read.
template <auto Member, class Counters>
uint64_t CountOf(const Counters& counters) {
  return (counters.*Member).load();
}

// Each row's count in `out` under its key.
template <class Counters, size_t N>
void PutCounts(nlohmann::json& out, const CounterFigure<Counters> (&rows)[N],
               const std::type_identity_t<Counters>& counters) {
  for (const CounterFigure<Counters>& row : rows) out[row.key] = row.count(counters);
}

}  // namespace gpufs
