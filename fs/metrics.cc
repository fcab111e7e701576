#include "fs/metrics.h"

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/account/stall_account.h"
#include "cache/cache_stat.h"
#include "cache/miss_reads.h"
#include "cache/tier/disk_tier.h"
#include "fs/control.h"
#include "source/blob_source.h"
#include "source/remote/address/peers.h"

namespace gpufs {
namespace {

// A const json's operator[] asserts the key is there; a source reports only the counters
// it keeps (a local one has no retries), so an absent key reads as null.
const nlohmann::json& At(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  return j.is_object() && j.contains(key) ? j[key] : kNull;
}

bool IsSample(const nlohmann::json& v) { return v.is_number() || v.is_boolean(); }

void Family(std::string& out, const Figure& f) {
  fmt::format_to(std::back_inserter(out), "# HELP gpufs_{0} {1}\n# TYPE gpufs_{0} {2}\n", f.metric,
                 f.help, f.kind == kCounter ? "counter" : "gauge");
}

// One sample; `labels` is empty or `name="value",...`.
void Sample(std::string& out, const Figure& f, const nlohmann::json& v,
            std::string_view labels = "") {
  std::string value;
  if (v.is_boolean()) {
    value = v.get<bool>() ? "1" : "0";
  } else if (v.is_number_float()) {
    value = fmt::format("{}", v.get<double>());
  } else {
    value = v.dump();
  }
  if (labels.empty()) {
    fmt::format_to(std::back_inserter(out), "gpufs_{} {}\n", f.metric, value);
  } else {
    fmt::format_to(std::back_inserter(out), "gpufs_{}{{{}}} {}\n", f.metric, labels, value);
  }
}

// The figures of `stats` that it holds, one series each; `figures` is a table of Figures or
// of rows made of one (figure.h), whose rows without a metric are for Stats() only.
template <class Table>
void Export(std::string& out, const Table& figures, const nlohmann::json& stats) {
  for (const Figure& f : figures) {
    if (!f.metric) continue;
    const nlohmann::json& v = At(stats, f.key);
    if (!IsSample(v)) continue;
    Family(out, f);
    Sample(out, f, v);
  }
}

// Figures of several objects, one series an object labelled `label`="its name".
template <class Table>
void ExportLabelled(std::string& out, const Table& figures, std::string_view label,
                    const std::vector<std::pair<std::string, const nlohmann::json*>>& objects) {
  for (const Figure& f : figures) {
    if (!f.metric) continue;
    Family(out, f);
    for (const auto& [name, stats] : objects) {
      const nlohmann::json& v = At(*stats, f.key);
      if (IsSample(v)) Sample(out, f, v, fmt::format("{}=\"{}\"", label, name));
    }
  }
}

// A label's value as Prometheus takes it: no quote or backslash to escape.
std::string LabelValue(std::string text) {
  std::replace(text.begin(), text.end(), '"', '\'');
  std::replace(text.begin(), text.end(), '\\', '/');
  return text;
}

// The source's own, each peer cache's (--peers) and a signed store's credentials.
void SourceMetrics(std::string& out, const nlohmann::json& io) {
  using namespace source_stat;
  Export(out, kFigures, io);
  Export(out, kDecodeCounterFigures, io);
  Export(out, Figures{&kDecodeSecondsFigure, 1}, io);
  if (const nlohmann::json& peers = At(io, kPeers); peers.is_array()) {
    std::vector<std::pair<std::string, const nlohmann::json*>> each;
    for (const nlohmann::json& peer : peers) {
      each.emplace_back(LabelValue(peer.value(remote::peer_stat::kUrl, "")), &peer);
    }
    ExportLabelled(out, Figures{&remote::peer_stat::kUpFigure, 1}, "peer", each);
    ExportLabelled(out, remote::peer_stat::kCounterFigures, "peer", each);
  }
  const nlohmann::json& c = At(io, kCredentials);
  if (!c.is_object()) return;
  Family(out, kCredentialInfo);
  Sample(out, kCredentialInfo, 1,
         fmt::format("{}=\"{}\"", kCredentialSource, LabelValue(c.value(kCredentialSource, ""))));
  Export(out, Figures{&kCredentialExpiresInFigure, 1}, c);
  Export(out, kCredentialCounterFigures, c);
}

// The stall account's: since the mount by where reads were served from, and the stall of
// the epoch in progress and of the last one that ended.
void StallMetrics(std::string& out, const nlohmann::json& stall) {
  using namespace stall_stat;
  if (!stall.is_object()) return;
  std::vector<std::pair<std::string, const nlohmann::json*>> from;
  for (const char* tier : kServedFromNames) from.emplace_back(tier, &stall[kTotals][kFrom][tier]);
  ExportLabelled(out, kFromFigures, "from", from);
  Export(out, Figures{&kStalledFigure, 1}, stall[kTotals]);
  std::vector<std::pair<std::string, const nlohmann::json*>> epochs;
  for (const char* which : {kCurrent, kLast}) {
    if (stall[which].is_object()) epochs.emplace_back(which, &stall[which]);
  }
  ExportLabelled(out, kEpochFigures, "epoch", epochs);
}

}  // namespace

std::string MetricsText(const Filesystem& fs) {
  const nlohmann::json stats = StatsOf(fs);
  std::string out;
  Export(out, fs_stat::kFigures, stats);
  Export(out, fs_stat::kServedFigures, stats[fs_stat::kServed]);
  Export(out, kernel_stat::kFigures, stats[fs_stat::kKernel]);
  SourceMetrics(out, stats[fs_stat::kIo]);
  const nlohmann::json& cache = stats[fs_stat::kCache];
  if (cache.is_null()) return out;
  Export(out, cache_stat::kCounterFigures, cache);
  Export(out, cache_stat::kFigures, cache);
  StallMetrics(out, At(cache, stall_stat::kStall));
  Export(out, tier_stat::kCounterFigures, At(cache, cache_stat::kTier));
  Export(out, tier_stat::kFigures, At(cache, cache_stat::kTier));
  Export(out, miss_read_stat::kCounterFigures, At(cache, miss_read_stat::kMissReads));
  return out;
}

std::string MetricsListing() {
  std::string out = "| metric | type | labels | what it counts |\n|---|---|---|---|\n";
  auto rows = [&out](const auto& figures, std::string_view labels) {
    for (const Figure& f : figures) {
      if (!f.metric) continue;
      fmt::format_to(std::back_inserter(out), "| `gpufs_{}` | {} | {} | {} |\n", f.metric,
                     f.kind == kCounter ? "counter" : "gauge", labels, f.help);
    }
  };
  rows(fs_stat::kFigures, "");
  rows(fs_stat::kServedFigures, "");
  rows(kernel_stat::kFigures, "");
  rows(source_stat::kFigures, "");
  rows(source_stat::kDecodeCounterFigures, "");
  rows(Figures{&source_stat::kDecodeSecondsFigure, 1}, "");
  rows(Figures{&remote::peer_stat::kUpFigure, 1}, "`peer`");
  rows(remote::peer_stat::kCounterFigures, "`peer`");
  rows(Figures{&source_stat::kCredentialInfo, 1}, "`source`");
  rows(Figures{&source_stat::kCredentialExpiresInFigure, 1}, "");
  rows(source_stat::kCredentialCounterFigures, "");
  rows(cache_stat::kCounterFigures, "");
  rows(cache_stat::kFigures, "");
  rows(stall_stat::kFromFigures, "`from`");
  rows(Figures{&stall_stat::kStalledFigure, 1}, "");
  rows(stall_stat::kEpochFigures, "`epoch`");
  rows(tier_stat::kCounterFigures, "");
  rows(tier_stat::kFigures, "");
  rows(miss_read_stat::kCounterFigures, "");
  return out;
}

}  // namespace gpufs
