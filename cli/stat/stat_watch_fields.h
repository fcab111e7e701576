// The figures of one `gpufs-stat -w` refresh off a terminal: the daemon's counters turned
// into rates between two samples of its stats reply, as named fields. They print as one
// key=value line, or with --json as one JSON object a line (JSON lines), so both forms
// carry the same keys and values; a figure not measured is "-" in the one, null in the
// other. The terminal view (stat_watch.h) reads the same rates.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpufs {

// The keys of figures -w measures itself (the daemon's keep the names of its tables).
namespace watch_stat {
// The share of the dataset's pages the kernel's page cache holds, measured when no read
// reached gpufsd in the interval: reads it answers never reach the daemon, so only this
// tells an epoch the kernel serves from an idle trainer. Null otherwise.
inline constexpr const char* kPageCacheRatio = "page_cache_ratio";
}  // namespace watch_stat

// What gpufs-stat measured of the kernel's page cache for a refresh.
struct KernelView {
  std::optional<double> page_cache_ratio;  // see watch_stat::kPageCacheRatio
};

// Helpers over a stats reply shared by the line and the terminal view.
namespace watch {

// The counters a refresh needs, as differences and totals.
struct Rates {
  double files_s = 0, served_mb_s = 0, source_mb_s = 0, requests_s = 0;
  double tier_read_mb_s = 0, tier_write_mb_s = 0;  // the disk tier's
  double peer_mb_s = 0, store_mb_s = 0;            // an object store's, with --peers
  double decoded_mb_s = 0, decode_cores = 0;       // a compressed archive's decoding
  double hit_now = -1, hit_total = -1;             // -1: no reads yet
  double amp_total = 0;
  uint64_t reads = 0;  // read requests that reached gpufsd in the interval
  uint64_t files_total = 0, bytes_total = 0, source_total = 0;
};
Rates RatesOf(const nlohmann::json& previous, const nlohmann::json& now, double dt_s);

// The value at `keys` under `j`, or null where it is absent.
const nlohmann::json& Child(const nlohmann::json& j, std::initializer_list<const char*> keys);
// What carries the kernel's requests ("io_uring", "dev_fuse"), without the reason a
// fallback gives.
std::string TransportOf(const nlohmann::json& now);
// The number at `keys` under `j`, or 0 where it is absent.
uint64_t At(const nlohmann::json& j, std::initializer_list<const char*> keys);
double Real(const nlohmann::json& j, const char* key);
// part / whole, or -1 (not measured) when whole is 0.
double Ratio(double part, double whole);
// The disk tier's room: its bound, or (bounded by free space) what it uses.
double TierRoom(const nlohmann::json& tier);
// A figure in milliseconds, or "-" where the source does not measure it.
std::string MsOrDash(const nlohmann::json& j, const char* key);

}  // namespace watch

struct WatchField {
  std::string key;
  nlohmann::json value;  // null: not measured
  int decimals = -1;     // a real number's digits after the point (JSON rounds to them)
};
using WatchFields = std::vector<WatchField>;

// The fields of a refresh, from two samples of the stats reply `dt_s` apart.
WatchFields WatchFieldsOf(const nlohmann::json& previous, const nlohmann::json& now, double dt_s,
                          const KernelView& kernel = {});
// The same fields as one key=value line, and as one JSON object (no newline either).
std::string WatchLine(const nlohmann::json& previous, const nlohmann::json& now, double dt_s,
                      const KernelView& kernel = {});
std::string WatchJson(const nlohmann::json& previous, const nlohmann::json& now, double dt_s,
                      const KernelView& kernel = {});

}  // namespace gpufs
